"""A fake Slack on 127.0.0.1 (aiohttp.web): the Web API methods memgate calls, file downloads,
and Socket Mode.

Web API requests are recorded, answered as Slack does (HTTP 200 with `ok`, the bot's scopes in
`x-oauth-scopes`), and 429s with `Retry-After` can be scripted. Socket Mode as the SDK meets it:
apps.connections.open hands out a ws:// URL, the socket says `hello`, events go out in
`events_api` envelopes, and an envelope not acknowledged (by its envelope_id) within
`ack_timeout` is sent again under a new envelope_id with `retry_attempt` one higher and
`retry_reason: timeout`, on this connection or the next one. At the end, a small harness runs a
real `SlackChannel` against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from channels.slack.channel import SlackChannel
from channels.slack.connect import BOT_SCOPES
from gateway.bus import InboundMessage, OutboundMessage
from gateway.config.slack import SlackConfig

Json = dict[str, Any]
WAIT = 5.0  # seconds a test waits for something the fake should see
BOT_USER = "UBOT0001"
TEAM = "T0000001"
ALICE = "UALICE01"
MALLORY = "UMALLORY"
DM = "D0000001"
STRANGER_DM = "D0000002"
GENERAL = "C0000001"

_clock = itertools.count(1)


def new_ts() -> str:
    """A fresh message ts, increasing: seconds and six decimals, as Slack writes them."""
    return f"{int(time.time())}.{next(_clock):06d}"


def message_event(
    channel: str, user: str, text: str, *, thread_ts: str | None = None, **extra: Any
) -> Json:
    """A `message` event as Slack sends it for a person's message."""
    kinds = {"D": "im", "C": "channel", "G": "group"}
    event: Json = {
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": new_ts(),
        "channel_type": kinds.get(channel[0], "channel"),
        "event_ts": "",
    }
    event["event_ts"] = event["ts"]
    if thread_ts:
        event["thread_ts"] = thread_ts
    event.update(extra)
    return event


@dataclass(frozen=True)
class Call:
    """One Web API request: its method, arguments (query, form or JSON) and the token used."""

    method: str
    args: Json
    token: str
    status: int
    at: float  # when it came (monotonic)


@dataclass
class Envelope:
    event_id: str
    payload: Json
    attempts: int = 0
    acked: bool = False
    sent_at: float = 0.0  # when it last went out (monotonic)
    kind: str = "events_api"  # or slash_commands
    ids: list[str] = field(default_factory=list)  # every envelope_id it went out under


@dataclass
class FakeSlack:
    url: str = ""
    token: str = "xoxb-fake-bot-token"
    app_token: str = "xapp-fake-app-token"
    scopes: list[str] = field(default_factory=lambda: list(BOT_SCOPES))
    ack_timeout: float = 3.0  # Slack's own: an event unacknowledged after 3 s is sent again
    ignore_acks: int = 0  # acknowledgements to drop, as if lost on the way
    calls: list[Call] = field(default_factory=list)
    messages: dict[str, list[Json]] = field(default_factory=dict)  # by channel, in order
    envelopes: list[Envelope] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=lambda: {ALICE: "Alice", MALLORY: "Mallory"})
    connections: int = 0
    _limits: dict[str, list[float]] = field(default_factory=dict)
    _refusals: dict[str, list[str]] = field(default_factory=dict)
    _sockets: list[web.WebSocketResponse] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _resender: asyncio.Task[None] | None = None

    @property
    def api_base(self) -> str:
        return f"{self.url}/api/"

    # -- scripting -----------------------------------------------------------------------------
    def rate_limit(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        """The next `times` calls of `method` get a 429 with `Retry-After: retry_after`."""
        self._limits.setdefault(method, []).extend([float(retry_after)] * times)

    def refuse(self, method: str, error: str, times: int = 1) -> None:
        """The next `times` calls of `method` are answered `{"ok": false, "error": error}`."""
        self._refusals.setdefault(method, []).extend([error] * times)

    def add_file(self, file_id: str, name: str, data: bytes, mimetype: str) -> Json:
        """A file object, as a message event carries it, downloadable with the bot token."""
        self.files[file_id] = data
        return {
            "id": file_id,
            "name": name,
            "mimetype": mimetype,
            "size": len(data),
            "url_private_download": f"{self.url}/files/{file_id}/{name}",
        }

    async def push(self, event: Json) -> Envelope:
        """Send `event` in an events_api envelope to the connected app (and again until acked)."""
        envelope = Envelope(f"Ev{uuid.uuid4().hex[:10].upper()}", {})
        envelope.payload = {
            "token": "verification-token",
            "team_id": TEAM,
            "api_app_id": "A0000001",
            "event": event,
            "type": "event_callback",
            "event_id": envelope.event_id,
            "event_time": int(time.time()),
        }
        self.envelopes.append(envelope)
        await self._deliver(envelope)
        return envelope

    async def slash(self, channel: str, user: str, text: str) -> Envelope:
        """`user` typing `/memgate <text>` in `channel`: a slash_commands envelope."""
        envelope = Envelope("", {}, kind="slash_commands")
        envelope.payload = {
            "token": "verification-token",
            "team_id": TEAM,
            "channel_id": channel,
            "user_id": user,
            "command": "/memgate",
            "text": text,
            "api_app_id": "A0000001",
            "response_url": f"{self.url}/commands/response",
            "trigger_id": uuid.uuid4().hex,
        }
        self.envelopes.append(envelope)
        await self._deliver(envelope)
        return envelope

    async def push_message(self, channel: str, user: str, text: str, **extra: Any) -> Envelope:
        """A person's message in `channel`, pushed as its event; the envelope."""
        return await self.push(message_event(channel, user, text, **extra))

    async def say(self, channel: str, user: str, text: str, **extra: Any) -> Json:
        """A person's message in `channel`, pushed as its event; the event."""
        event = message_event(channel, user, text, **extra)
        await self.push(event)
        return event

    async def drop(self) -> None:
        """Close the open sockets (the SDK connects again)."""
        for ws in list(self._sockets):
            await ws.close()

    # -- reading -------------------------------------------------------------------------------
    def sent(self, channel: str | None = None) -> list[Json]:
        """The bot's messages as they stand now (edits applied, deletions gone)."""
        if channel is not None:
            return list(self.messages.get(channel, []))
        return [m for messages in self.messages.values() for m in messages]

    def texts(self, channel: str) -> list[str]:
        return [m["text"] for m in self.sent(channel)]

    def of(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    async def wait_for(self, predicate: Callable[[], object]) -> None:
        async with asyncio.timeout(WAIT), self._changed:
            await self._changed.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- the Web API ---------------------------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args: Json = dict(request.query)
        if request.content_type == "application/json":
            args.update(await request.json())
        elif request.can_read_body:
            args.update(await request.post())
        token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        token = token or str(args.pop("token", ""))
        limits = self._limits.get(method)
        status = 429 if limits else 200
        self.calls.append(Call(method, args, token, status, time.monotonic()))
        await self._notify()
        if limits:
            retry_after = limits.pop(0)
            headers = {"Retry-After": str(int(retry_after))}
            return _json({"ok": False, "error": "ratelimited"}, 429, headers)
        wanted = self.app_token if method == "apps.connections.open" else self.token
        if token != wanted:
            return _json({"ok": False, "error": "invalid_auth"})
        if self._refusals.get(method):
            return _json({"ok": False, "error": self._refusals[method].pop(0)})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return _json({"ok": False, "error": "unknown_method"})
        payload = await handler(args)
        await self._notify()
        headers = {"x-oauth-scopes": ",".join(self.scopes)} if method == "auth.test" else {}
        return _json(payload, headers=headers)

    async def _auth_test(self, args: Json) -> Json:
        return {
            "ok": True,
            "url": "https://fake.slack.com/",
            "team": "Fake Team",
            "user": "memgate",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": "B0000001",
        }

    async def _apps_connections_open(self, args: Json) -> Json:
        return {"ok": True, "url": self.url.replace("http://", "ws://") + "/link/?ticket=fake"}

    async def _chat_postMessage(self, args: Json) -> Json:
        channel, text = str(args.get("channel") or ""), args.get("text")
        if not channel or not text:
            return {"ok": False, "error": "no_text" if channel else "channel_not_found"}
        message: Json = {"ts": new_ts(), "text": str(text), "user": BOT_USER}
        message["thread_ts"] = args.get("thread_ts") or None
        message["mrkdwn"] = args.get("mrkdwn", True) not in (False, "false", "0")
        self.messages.setdefault(channel, []).append(message)
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": message}

    async def _chat_update(self, args: Json) -> Json:
        for message in self.messages.get(str(args.get("channel")), []):
            if message["ts"] == args.get("ts"):
                message["text"] = str(args.get("text"))
                return {"ok": True, "channel": args["channel"], "ts": message["ts"]}
        return {"ok": False, "error": "message_not_found"}

    async def _chat_delete(self, args: Json) -> Json:
        messages = self.messages.get(str(args.get("channel")), [])
        kept = [m for m in messages if m["ts"] != args.get("ts")]
        if len(kept) == len(messages):
            return {"ok": False, "error": "message_not_found"}
        self.messages[str(args["channel"])] = kept
        return {"ok": True}

    async def _users_info(self, args: Json) -> Json:
        user = str(args.get("user"))
        name = self.names.get(user)
        if name is None:
            return {"ok": False, "error": "user_not_found"}
        profile = {"display_name": name, "real_name": name}
        return {"ok": True, "user": {"id": user, "name": name.lower(), "profile": profile}}

    async def _file(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=302, headers={"Location": "/login"})
        data = self.files.get(request.match_info["file_id"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    # -- Socket Mode ---------------------------------------------------------------------------
    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connections += 1
        hello = {
            "type": "hello",
            "num_connections": 1,
            "debug_info": {"host": "fake", "approximate_connection_time": 18060},
            "connection_info": {"app_id": "A0000001"},
        }
        await ws.send_str(json.dumps(hello))
        await self._notify()
        for envelope in self.envelopes:  # what the last connection left unacknowledged
            if not envelope.acked:
                await self._deliver(envelope)
        try:
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                await self._ack(json.loads(frame.data))
        finally:
            self._sockets.remove(ws)
        return ws

    async def _ack(self, frame: Json) -> None:
        envelope_id = frame.get("envelope_id")
        for envelope in self.envelopes:
            if envelope_id in envelope.ids:
                if self.ignore_acks > 0:
                    self.ignore_acks -= 1
                else:
                    envelope.acked = True
        await self._notify()

    async def _deliver(self, envelope: Envelope) -> None:
        """Send the envelope on the open socket (if any) under a fresh envelope_id."""
        if not self._sockets:
            return
        envelope_id = str(uuid.uuid4())
        frame = {
            "envelope_id": envelope_id,
            "type": envelope.kind,
            "accepts_response_payload": envelope.kind != "events_api",
            "retry_attempt": envelope.attempts,
            "retry_reason": "timeout" if envelope.attempts else "",
            "payload": envelope.payload,
        }
        envelope.ids.append(envelope_id)
        envelope.sent_at = time.monotonic()
        envelope.attempts += 1
        with contextlib.suppress(ConnectionError):
            await self._sockets[-1].send_str(json.dumps(frame))

    async def _resend(self) -> None:
        """Slack's retry: an envelope unacknowledged for `ack_timeout` goes out again."""
        while True:
            await asyncio.sleep(self.ack_timeout / 4)
            for envelope in self.envelopes:
                overdue = time.monotonic() - envelope.sent_at >= self.ack_timeout
                if not envelope.acked and envelope.attempts and overdue:
                    await self._deliver(envelope)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files/{file_id}/{name}", self._file)
        app.router.add_get("/link/", self._link)
        return app

    async def close(self) -> None:
        if self._resender is not None:
            self._resender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resender
        for ws in list(self._sockets):
            await ws.close()


def _json(payload: Json, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        text=json.dumps(payload), status=status, content_type="application/json", headers=headers
    )


@contextlib.asynccontextmanager
async def fake_slack(**options: Any) -> AsyncIterator[FakeSlack]:
    """The fake on 127.0.0.1 with a free port, for the block."""
    fake = FakeSlack(**options)
    runner = web.AppRunner(fake.app(), shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    fake._resender = asyncio.create_task(fake._resend())
    try:
        yield fake
    finally:
        await fake.close()
        await runner.cleanup()


# -- harness: a SlackChannel served against the fake -----------------------------------------------


class Recorder:
    """A handler that records what it is given and answers with `reply(text)`."""

    def __init__(self, reply: Callable[[str], str] = lambda text: f"echo: {text}") -> None:
        self.reply = reply
        self.inbound: list[InboundMessage] = []

    async def __call__(
        self, message: InboundMessage, stream: object = None
    ) -> OutboundMessage | None:
        self.inbound.append(message)
        return OutboundMessage(message.channel, message.chat_id, self.reply(message.text))


def settings_for(fake: FakeSlack, **options: Any) -> SlackConfig:
    return SlackConfig(
        enabled=True,
        token=fake.token,
        app_token=fake.app_token,
        api_base=fake.api_base,
        allow_from=options.pop("allow_from", [ALICE]),
        dm_policy=options.pop("dm_policy", "allowlist"),
        streaming=options.pop("streaming", "off"),
        **options,
    )


@contextlib.asynccontextmanager
async def serving(
    fake: FakeSlack, handler: Any, workspace: Path, **options: Any
) -> AsyncIterator[SlackChannel]:
    """Run a SlackChannel against the fake until the block ends; entered once it is connected."""
    fields = {k: options.pop(k) for k in list(options) if k in SlackConfig.model_fields}
    channel = SlackChannel(handler, settings_for(fake, **fields), workspace=workspace, **options)
    task = asyncio.create_task(channel.run())
    try:
        async with asyncio.timeout(WAIT):
            done = asyncio.ensure_future(channel.ready.wait())
            await asyncio.wait({task, done}, return_when=asyncio.FIRST_COMPLETED)
            done.cancel()
        if task.done():
            task.result()
        yield channel
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
