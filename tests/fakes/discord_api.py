"""A fake Discord on 127.0.0.1 (aiohttp.web): the REST API, attachment downloads, and the gateway.

REST requests are recorded (with their status) and 429s can be scripted; the gateway speaks HELLO,
heartbeat ACKs, IDENTIFY → READY, and RESUME → missed events replayed + RESUMED, so a test can push
dispatches and drop the socket with a close code. Frames go out as plain JSON text: discord.py asks
for zlib-stream compression but reads uncompressed text frames as they are. At the end, a small
harness runs a real `DiscordChannel` against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.typedefs import Handler

from channels.discord.channel import DiscordChannel
from gateway.bus import InboundMessage, OutboundMessage
from gateway.config.models import DiscordConfig

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
BOT_ID = 1_200_000_000_000_000_001
APPLICATION_ID = 1_200_000_000_000_000_002
OWNER_ID = 1_200_000_000_000_000_003
MESSAGE_CONTENT_INTENT = 1 << 15
WAIT = 5.0  # seconds a test waits for something the fake should see

Json = dict[str, Any]

_snowflakes = itertools.count((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22)


def snowflake() -> int:
    """A fresh, increasing Discord id."""
    return next(_snowflakes)


def _now() -> str:
    return datetime.now(UTC).isoformat()


# -- payloads ------------------------------------------------------------------------------------


def user(user_id: int, name: str, *, bot: bool = False) -> Json:
    """A user object."""
    return {
        "id": str(user_id),
        "username": name,
        "global_name": name.title(),
        "discriminator": "0",
        "avatar": None,
        "bot": bot,
    }


BOT_USER = user(BOT_ID, "memgate", bot=True)


def text_channel(channel_id: int, guild_id: int, name: str = "general") -> Json:
    """A guild text channel."""
    return {
        "id": str(channel_id),
        "guild_id": str(guild_id),
        "type": 0,
        "name": name,
        "position": 0,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
        "topic": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
    }


def thread(thread_id: int, guild_id: int, parent_id: int, name: str = "a thread") -> Json:
    """A public thread under a text channel."""
    return {
        "id": str(thread_id),
        "guild_id": str(guild_id),
        "parent_id": str(parent_id),
        "owner_id": str(OWNER_ID),
        "type": 11,
        "name": name,
        "message_count": 0,
        "member_count": 1,
        "rate_limit_per_user": 0,
        "last_message_id": None,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": _now(),
            "locked": False,
        },
    }


def guild(
    guild_id: int, *, channels: Iterable[Json] = (), threads: Iterable[Json] = (), bot_role: int
) -> Json:
    """A GUILD_CREATE payload with the bot as a member holding its managed role `bot_role`."""
    role = {
        "color": 0,
        "hoist": False,
        "mentionable": True,
        "permissions": "0",
        "position": 0,
        "flags": 0,
    }
    return {
        "id": str(guild_id),
        "name": "memgate test server",
        "icon": None,
        "owner_id": str(OWNER_ID),
        "unavailable": False,
        "large": False,
        "member_count": 2,
        "features": [],
        "emojis": [],
        "stickers": [],
        "roles": [
            {**role, "id": str(guild_id), "name": "@everyone", "managed": False},
            {
                **role,
                "id": str(bot_role),
                "name": "memgate",
                "managed": True,
                "tags": {"bot_id": str(BOT_ID)},
            },
        ],
        "members": [
            {
                "user": BOT_USER,
                "roles": [str(bot_role)],
                "joined_at": _now(),
                "deaf": False,
                "mute": False,
                "flags": 0,
            },
        ],
        "channels": list(channels),
        "threads": list(threads),
        "voice_states": [],
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
    }


def attachment(url: str, filename: str, size: int, content_type: str | None) -> Json:
    """An attachment object pointing at `url`."""
    payload: Json = {
        "id": str(snowflake()),
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
    }
    if content_type:
        payload["content_type"] = content_type
    return payload


def message(
    channel_id: int,
    author: Json,
    content: str,
    *,
    guild_id: int | None = None,
    mentions: Iterable[Json] = (),
    mention_roles: Iterable[int] = (),
    attachments: Iterable[Json] = (),
    referenced: Json | None = None,
    kind: int = 0,
) -> Json:
    """A MESSAGE_CREATE payload; `referenced` makes it a reply to that message."""
    payload: Json = {
        "id": str(snowflake()),
        "channel_id": str(channel_id),
        "author": author,
        "content": content,
        "timestamp": _now(),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": list(mentions),
        "mention_roles": [str(r) for r in mention_roles],
        "attachments": list(attachments),
        "embeds": [],
        "pinned": False,
        "type": kind,
    }
    if guild_id is not None:
        payload["guild_id"] = str(guild_id)
        payload["member"] = {
            "roles": [],
            "joined_at": _now(),
            "deaf": False,
            "mute": False,
            "flags": 0,
        }
    if referenced is not None:
        payload["type"] = 19
        payload["message_reference"] = {
            "message_id": referenced["id"],
            "channel_id": referenced["channel_id"],
        }
        payload["referenced_message"] = referenced
    return payload


# -- the server ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One REST request as the fake saw it; `path` is without the /api/v10 prefix."""

    method: str
    path: str
    body: Any
    status: int
    at: float  # loop time, for checking that a retry waited


@dataclass
class FakeDiscord:
    """State of the fake: recorded traffic, scripted failures, and the gateway session."""

    token: str = "fake-bot-token"
    url: str = ""
    requests: list[Request] = field(default_factory=list)
    guilds: list[Json] = field(default_factory=list)  # sent as GUILD_CREATE after READY
    identifies: list[Json] = field(default_factory=list)
    readies: int = 0  # sessions sent READY and their guilds: from then on a message reaches them
    resumes: list[Json] = field(default_factory=list)
    connections: int = 0
    login_statuses: list[int] = field(default_factory=list)  # scripted for GET /users/@me
    close_on_identify: int | None = None  # e.g. 4014 to refuse the intents
    # The application's flags: GATEWAY_MESSAGE_CONTENT_LIMITED (1 << 19), the intent switched on
    # in the Developer Portal for a bot in fewer than 100 servers. 0: switched off.
    application_flags: int = 1 << 19
    # Set: a message POST counts in `held` and waits for it before Discord takes the message.
    send_hold: asyncio.Event | None = None
    held: int = 0
    # Set: Discord makes the message, then its answer waits for this (a kill meanwhile loses it).
    answer_hold: asyncio.Event | None = None
    # Messages made with enforce_nonce, by (channel, nonce): Discord returns the first again.
    _nonces: dict[tuple[int, str], Json] = field(default_factory=dict)
    # The bot's messages as they read now (edits included), per channel, in the order sent.
    posted: dict[int, dict[str, Json]] = field(default_factory=dict)
    _scripted: dict[tuple[str, str], list[Callable[[], web.Response]]] = field(default_factory=dict)
    _files: dict[str, bytes] = field(default_factory=dict)
    _session_id: str | None = None
    _sessions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _events: list[Json] = field(default_factory=list)  # this session's dispatches, for replay
    _seq: int = 0
    _ws: web.WebSocketResponse | None = None  # the identified or resumed socket, if any
    _sockets: set[web.WebSocketResponse] = field(default_factory=set)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def api_base(self) -> str:
        return self.url + API_PREFIX

    @property
    def gateway_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/gateway"

    # -- scripting ---------------------------------------------------------------------------------
    def rate_limit(self, method: str, path: str, retry_after: float = 0.2, times: int = 1) -> None:
        """Answer the next `times` requests to `method path` with 429 and `retry_after`."""
        self._scripted.setdefault((method, path), []).extend(
            [lambda: _too_many(retry_after)] * times
        )

    def fail(self, method: str, path: str, status: int = 403, times: int = 1) -> None:
        """Answer the next `times` requests to `method path` with an error `status`."""
        body = {"message": f"scripted {status}", "code": 50013}
        self._scripted.setdefault((method, path), []).extend(
            [lambda: _json(body, status=status)] * times
        )

    def add_file(self, name: str, data: bytes) -> str:
        """Serve `data` for download; returns the URL to put in an attachment."""
        self._files[name] = data
        return f"{self.url}/attachments/{name}"

    def delete(self, channel_id: int, message_id: str) -> None:
        """A person (a moderator) deletes one of the bot's messages."""
        del self.posted[channel_id][message_id]

    async def dispatch(self, event: str, data: Json) -> None:
        """Send a dispatch now, or keep it for the resume if the client is disconnected."""
        self._seq += 1
        frame = {"op": 0, "t": event, "s": self._seq, "d": data}
        self._events.append(frame)
        if self._ws is not None:
            await self._ws.send_json(frame)

    async def send_message(self, channel_id: int, author: Json, content: str, **kw: Any) -> Json:
        """Dispatch a MESSAGE_CREATE built by `message()`; returns its payload."""
        payload = message(channel_id, author, content, **kw)
        await self.dispatch("MESSAGE_CREATE", payload)
        return payload

    async def drop(self, code: int = 4000) -> None:
        """Close the gateway socket with `code`; dispatches are kept until the client resumes."""
        ws, self._ws = self._ws, None
        assert ws is not None, "no gateway connection to drop"
        await ws.close(code=code)

    # -- reading what happened ---------------------------------------------------------------------
    def sent(self, channel_id: int | None = None) -> list[Json]:
        """Bodies of messages delivered (2xx) to a channel, or to any channel, in order; a send
        Discord deduplicated by its nonce made no message and is not listed."""
        pattern = re.compile(rf"/channels/{channel_id if channel_id else '[0-9]+'}/messages")
        made: list[Json] = []
        nonces: set[tuple[str, str]] = set()
        for r in self.requests:
            if r.method != "POST" or r.status >= 300 or not pattern.fullmatch(r.path):
                continue
            if isinstance(r.body, dict) and r.body.get("enforce_nonce") and "nonce" in r.body:
                key = (r.path, str(r.body["nonce"]))
                if key in nonces:
                    continue
                nonces.add(key)
            made.append(r.body)
        return made

    def shown(self, channel_id: int) -> list[str]:
        """The content of each of the bot's messages in a channel, as it reads now."""
        return [payload["content"] for payload in self.posted.get(channel_id, {}).values()]

    def edits(self, channel_id: int) -> list[Request]:
        """Every accepted edit (PATCH) of the bot's messages in a channel, in order."""
        pattern = re.compile(rf"/channels/{channel_id}/messages/[0-9]+")
        return [
            r
            for r in self.requests
            if r.method == "PATCH" and r.status < 300 and pattern.fullmatch(r.path)
        ]

    def calls(self, method: str, path: str) -> list[Request]:
        """Every request to `method path`, whatever its status."""
        return [r for r in self.requests if r.method == method and r.path == path]

    async def wait_for(self, predicate: Callable[[], object]) -> None:
        """Wait until `predicate()` holds (is truthy); checked after every request and gateway event."""
        async with asyncio.timeout(WAIT), self._changed:
            await self._changed.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- REST --------------------------------------------------------------------------------------
    @web.middleware
    async def _record(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith(API_PREFIX):
            return await handler(request)
        path = request.path.removeprefix(API_PREFIX)
        body = await request.json() if request.can_read_body else None
        response: web.StreamResponse
        if request.headers.get("Authorization") != f"Bot {self.token}":
            response = _json({"message": "401: Unauthorized", "code": 0}, status=401)
        elif scripted := self._scripted.get((request.method, path)):
            response = scripted.pop(0)()
        else:
            response = await handler(request)
        loop_time = asyncio.get_running_loop().time()
        self.requests.append(Request(request.method, path, body, response.status, loop_time))
        await self._notify()
        return response

    async def _me(self, request: web.Request) -> web.Response:
        if self.login_statuses:
            status = self.login_statuses.pop(0)
            return _json({"message": "scripted", "code": 0}, status=status)
        return _json(BOT_USER)

    async def _application(self, request: web.Request) -> web.Response:
        return _json(
            {
                "id": str(APPLICATION_ID),
                "name": "memgate",
                "icon": None,
                "description": "",
                "bot_public": False,
                "bot_require_code_grant": False,
                "verify_key": "0" * 64,
                "owner": user(OWNER_ID, "owner"),
                "flags": self.application_flags,
            }
        )

    async def _gateway_info(self, request: web.Request) -> web.Response:
        return _json(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 1000,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def _create_message(self, request: web.Request) -> web.Response:
        body = await request.json()
        channel_id = int(request.match_info["channel_id"])
        nonce = body.get("nonce")
        if body.get("enforce_nonce") and nonce is not None:
            made = self._nonces.get((channel_id, str(nonce)))
            if made is not None:
                return _json(made)  # the message this nonce made already; no second one
        if self.send_hold is not None:
            self.held += 1
            async with self._changed:
                self._changed.notify_all()
            await self.send_hold.wait()
        content = body.get("content", "")
        if len(content) > 2000:
            return _too_long()
        made = message(channel_id, BOT_USER, content)
        if body.get("enforce_nonce") and nonce is not None:
            self._nonces[(channel_id, str(nonce))] = made
        self.posted.setdefault(channel_id, {})[made["id"]] = made
        if self.answer_hold is not None:
            loop_time = asyncio.get_running_loop().time()
            path = request.path.removeprefix(API_PREFIX)
            self.requests.append(Request("POST", path, body, 200, loop_time))  # made, and seen
            self.held += 1
            await self._notify()
            await self.answer_hold.wait()
        return _json(made)

    async def _edit_message(self, request: web.Request) -> web.Response:
        body = await request.json()
        channel_id = int(request.match_info["channel_id"])
        payload = self.posted.get(channel_id, {}).get(request.match_info["message_id"])
        if payload is None:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        if len(body.get("content", "")) > 2000:
            return _too_long()
        payload["content"] = body.get("content", payload["content"])
        payload["edited_timestamp"] = _now()
        return _json(payload)

    async def _delete_message(self, request: web.Request) -> web.Response:
        channel_id = int(request.match_info["channel_id"])
        if self.posted.get(channel_id, {}).pop(request.match_info["message_id"], None) is None:
            return _json({"message": "Unknown Message", "code": 10008}, status=404)
        return web.Response(status=204)

    async def _typing(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _not_found(self, request: web.Request) -> web.Response:
        return _json({"message": "404: Not Found", "code": 0}, status=404)

    async def _download(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests.append(
            Request("GET", f"/attachments/{name}", None, 200, asyncio.get_running_loop().time())
        )
        await self._notify()
        if name not in self._files:
            raise web.HTTPNotFound()
        return web.Response(body=self._files[name], content_type="application/octet-stream")

    # -- gateway -----------------------------------------------------------------------------------
    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self._sockets.add(ws)
        try:
            await ws.send_json({"op": 10, "d": {"heartbeat_interval": 41_250}})
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                if payload["op"] == 1:
                    await ws.send_json({"op": 11})
                elif payload["op"] == 2:
                    await self._identify(ws, payload["d"])
                elif payload["op"] == 6:
                    await self._resume(ws, payload["d"])
        finally:
            self._sockets.discard(ws)
            if self._ws is ws:
                self._ws = None
            await self._notify()
        return ws

    async def _identify(self, ws: web.WebSocketResponse, data: Json) -> None:
        self.identifies.append(data)
        if data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        if self.close_on_identify is not None:
            await ws.close(code=self.close_on_identify, message=b"Disallowed intent(s).")
            return
        self._session_id = f"session-{next(self._sessions)}"
        self._events, self._seq, self._ws = [], 0, ws
        await self.dispatch(
            "READY",
            {
                "v": 10,
                "user": BOT_USER,
                "guilds": [{"id": g["id"], "unavailable": True} for g in self.guilds],
                "session_id": self._session_id,
                "resume_gateway_url": self.gateway_url,
                "application": {"id": str(APPLICATION_ID), "flags": 0},
            },
        )
        for payload in self.guilds:
            await self.dispatch("GUILD_CREATE", payload)
        self.readies += 1
        await self._notify()

    async def _resume(self, ws: web.WebSocketResponse, data: Json) -> None:
        self.resumes.append(data)
        if data.get("token") != self.token or data.get("session_id") != self._session_id:
            await ws.send_json({"op": 9, "d": False})
            return
        # Snapshot and switch in one step, so a dispatch made meanwhile is neither lost nor doubled.
        missed = [frame for frame in self._events if frame["s"] > (data.get("seq") or 0)]
        self._ws = ws
        for frame in missed:
            await ws.send_json(frame)
        await self.dispatch("RESUMED", {})
        await self._notify()

    # -- lifecycle ---------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_get(API_PREFIX + "/users/@me", self._me)
        app.router.add_get(API_PREFIX + "/oauth2/applications/@me", self._application)
        app.router.add_get(API_PREFIX + "/gateway", self._gateway_info)
        app.router.add_get(API_PREFIX + "/gateway/bot", self._gateway_info)
        app.router.add_post(API_PREFIX + "/channels/{channel_id}/messages", self._create_message)
        app.router.add_patch(
            API_PREFIX + "/channels/{channel_id}/messages/{message_id}", self._edit_message
        )
        app.router.add_delete(
            API_PREFIX + "/channels/{channel_id}/messages/{message_id}", self._delete_message
        )
        app.router.add_post(API_PREFIX + "/channels/{channel_id}/typing", self._typing)
        app.router.add_route("*", API_PREFIX + "/{tail:.*}", self._not_found)
        app.router.add_get("/attachments/{name}", self._download)
        app.router.add_get("/gateway", self._gateway)
        return app

    async def close_sockets(self) -> None:
        """Close every gateway socket (going away), so the server can stop at once."""
        for ws in list(self._sockets):
            await ws.close(code=1001)


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py parses a body as JSON only if Content-Type is exactly application/json, so the
    # body goes in as bytes (aiohttp's json_response would append "; charset=utf-8").
    return web.Response(
        body=json.dumps(payload).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _too_long() -> web.Response:
    """Discord's answer to content over 2,000 characters."""
    body = {"message": "Invalid Form Body", "code": 50035,
            "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}}}  # fmt: skip
    return _json(body, status=400)


def _too_many(retry_after: float) -> web.Response:
    return _json(
        {"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
        status=429,
        headers={
            "Via": "1.1 google",  # discord.py takes a 429 without it for a Cloudflare ban
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset-After": str(retry_after),
            "X-RateLimit-Bucket": "fake-bucket",
            "X-RateLimit-Scope": "user",
            "Retry-After": str(max(1, round(retry_after))),
        },
    )


async def start_fake_discord() -> tuple[FakeDiscord, web.AppRunner]:
    """Start the fake on 127.0.0.1 with a free port; stop it with `stop_fake_discord`."""
    fake = FakeDiscord()
    runner = web.AppRunner(fake.app(), shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"
    return fake, runner


async def stop_fake_discord(fake: FakeDiscord, runner: web.AppRunner) -> None:
    await fake.close_sockets()
    await runner.cleanup()


async def eventually(predicate: Callable[[], bool]) -> None:
    """Poll `predicate` until it holds, for state the fake cannot observe (e.g. `connected`)."""
    async with asyncio.timeout(WAIT):
        # Polling, because a channel exposes `connected` as a property, with no event to await.
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


# -- harness: a DiscordChannel served against the fake -------------------------------------------

ALICE = user(1_300_000_000_000_000_001, "alice")
MALLORY = user(1_300_000_000_000_000_002, "mallory")
OTHER_BOT = user(1_300_000_000_000_000_003, "otherbot", bot=True)
DM = 1_310_000_000_000_000_001
BARRIER_DM = 1_310_000_000_000_000_002
STRANGER_DM = 1_310_000_000_000_000_003
GUILD = 1_320_000_000_000_000_001
GENERAL = 1_320_000_000_000_000_002
THREAD = 1_320_000_000_000_000_003
BOT_ROLE = 1_320_000_000_000_000_004
BOT_MENTION = f"<@{BOT_ID}>"


def standard_guild() -> Json:
    """The server the tests use: one text channel, #general, and the bot's managed role."""
    return guild(GUILD, channels=[text_channel(GENERAL, GUILD)], bot_role=BOT_ROLE)


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


@contextlib.asynccontextmanager
async def serving(
    fake: FakeDiscord, handler: Any, workspace: Path, **options: Any
) -> AsyncIterator[DiscordChannel]:
    """Run a DiscordChannel against the fake until the block ends."""
    settings = DiscordConfig(
        token=fake.token,
        api_base=fake.api_base,
        gateway_url=fake.gateway_url,
        allow_from=options.pop("allow_from", [ALICE["id"]]),
        dm_policy=options.pop("dm_policy", "allowlist"),
        **{k: options.pop(k) for k in list(options) if k in DiscordConfig.model_fields},
    )
    channel = DiscordChannel(
        handler, settings, workspace=workspace, guild_ready_timeout=0.05, **options
    )
    task = asyncio.create_task(channel.run())
    try:
        await eventually(lambda: channel.connected or task.done())
        if task.done():
            task.result()
        yield channel
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def barrier(fake: FakeDiscord) -> None:
    """Send Alice's DM and wait for its answer: every earlier event has been looked at by then."""
    before = len(fake.sent(BARRIER_DM))
    await fake.send_message(BARRIER_DM, ALICE, "barrier")
    await fake.wait_for(lambda: len(fake.sent(BARRIER_DM)) > before)
