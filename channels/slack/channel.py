"""The Slack adapter: Socket Mode events turned into `InboundMessage`s, replies sent back.

Each event is judged, journaled in the inbox (when admitted) and only then acknowledged, all
before anything else awaits: a kill before the acknowledgement leaves Slack to send the event
again, a kill after it leaves the journal to answer it at the next start, and the events
already taken (by event_id, and by message) are dropped, so a message is answered once. A
thread is a session of its own (`slack:<channel>:thread:<ts>`) and its replies stay in it.
The `channels/slack/` modules are the only ones that import `slack_sdk`; of ours they import
`gateway.bus`, `gateway.config.slack`, `memory.fileio` and the `channels/` root modules.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.admission import Decision, Request
from channels.errors import SlackChannelError
from channels.inbox import Inbox, Json, Send, settle
from channels.live import LiveReply, Pacer
from channels.pairing import PairingStore
from channels.reception import Reception
from channels.seen import Seen
from channels.slack import events
from channels.slack.connect import (
    NETWORK_ERRORS,
    call,
    error_code,
    open_socket_url,
    refused,
    socket_client,
    web_client,
)
from channels.slack.delivery import EDIT_EVERY, Poster, live_reply
from channels.slack.events import Incoming
from channels.slack.files import save_files
from channels.tasks import MessageTasks
from gateway.bus import Handler, OutboundMessage
from gateway.config.slack import SlackConfig

log = logging.getLogger(__name__)

_LOGIN_TIMEOUT = 30.0
# Threads the bot answered in that it remembers: a reply in an older one must mention it.
THREADS_KEPT = 10_000


class SlackChannel:
    """A Slack app in Socket Mode: DMs, channels per `group_policy`, threads as sessions."""

    name = "slack"

    def __init__(
        self,
        handler: Handler,
        settings: SlackConfig,
        *,
        workspace: Path,
        state_dir: Path | None = None,
        pairing: PairingStore | None = None,
        shutdown_grace: float = 0.0,
        max_media_bytes: int = 25 * 1024 * 1024,
    ) -> None:
        """`settings` come validated (URLs); the tokens, whose variables commands such as
        `memgate init` may leave unset, are checked here."""
        self._token = settings.token.strip()
        self._app_token = settings.app_token.strip()
        if not self._token.startswith("xoxb-"):
            raise SlackChannelError("channels.slack.token: must be the bot token (xoxb-…)")
        if not self._app_token.startswith("xapp-"):
            raise SlackChannelError(
                "channels.slack.app_token: must be the app-level token (xapp-…)"
            )
        self._handler = handler
        self._streaming = settings.streaming == "on"
        self._api_base = settings.api_base
        self._reception = Reception(self.name, settings, pairing)
        self._workspace = Path(workspace)
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._max_media_bytes = max_media_bytes
        self._shutdown_grace = shutdown_grace
        self._pacer = Pacer(EDIT_EVERY)
        self._tasks = MessageTasks(self.name)
        # Event ids and messages taken: Slack sends an event again when its acknowledgement was
        # late or lost, and one message may come as two events (`message` and `app_mention`).
        self._seen = Seen()
        self._sequence = events.Sequence()
        self._threads = Seen(size=THREADS_KEPT)  # threads the bot answered in: a reply addresses it
        self._names: dict[str, str] = {}
        self._up = asyncio.Event()
        self._started = False
        self._stopping = False
        self._bot_user = ""
        self._session: aiohttp.ClientSession | None = None
        self._poster: Poster | None = None
        self._web: AsyncWebClient | None = None
        self._inbox: Inbox | None = None

    def __repr__(self) -> str:  # never the tokens
        return f"<SlackChannel bot_user={self._bot_user or '-'} connected={self.connected}>"

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    @property
    def ready(self) -> asyncio.Event:
        return self._up

    def set_access(self, *, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        self._reception.set_access(allow_from, dm_policy, group_policy)

    async def run(self) -> None:
        """Log in, connect Socket Mode and serve until cancelled (the SDK reconnects itself).

        On cancellation no new event is taken; turns already running get `shutdown_grace`
        seconds to finish and send their replies, then the connection closes.
        """
        if self._started:
            raise RuntimeError("SlackChannel.run() was already started")
        self._started = True
        async with aiohttp.ClientSession() as session:
            self._session = session
            web = web_client(self._token, self._api_base, session)
            self._web, self._poster = web, Poster(web)
            socket = None
            try:
                async with self._tasks.running(self._shutdown_grace):
                    try:
                        await self._login(web)
                        for record in await asyncio.to_thread(self._open_inbox):
                            self._tasks.spawn(self._replay, record)
                        socket = socket_client(self._app_token, web)
                        socket.message_listeners.append(self._on_frame)
                        socket.on_close_listeners.append(self._on_close)
                        socket.socket_mode_request_listeners.append(self._on_request)
                        socket.wss_uri = await open_socket_url(web, self._app_token)
                        await socket.connect()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
                        await asyncio.Event().wait()  # served by the SDK's tasks until cancelled
                    finally:
                        self._up.clear()
                        self._stopping = True  # no new event; running turns get the grace
            finally:
                if socket is not None:
                    await socket.close()  # type: ignore[no-untyped-call]
                if self._inbox is not None:
                    self._inbox.close()

    async def _login(self, web: AsyncWebClient) -> None:
        try:
            async with asyncio.timeout(_LOGIN_TIMEOUT):
                auth = await call(web.auth_test)
        except NETWORK_ERRORS as exc:
            if refused(exc):
                raise SlackChannelError(
                    f"Slack refused the bot token (channels.slack.token): {error_code(exc)}"
                ) from None
            raise SlackChannelError(f"Slack login failed: {error_code(exc)}") from None
        self._bot_user = str(auth["user_id"])
        log.info("slack logged in bot_user=%s team=%s", self._bot_user, auth.get("team_id"))

    # -- sending -----------------------------------------------------------------------------------
    async def send(self, message: OutboundMessage) -> bool:
        """Send `message` as mrkdwn pieces (in its thread, `metadata["thread_ts"]`); failures
        are logged, never raised. True when every piece went out; then it is no longer owed."""
        outcome = await self._send_pieces(message)
        if outcome is not None:
            await message.sent()
        return bool(outcome)

    async def _send_pieces(self, message: OutboundMessage) -> bool | None:
        if self._poster is None:
            log.warning("slack send while not running chat_id=%s", message.chat_id)
            return None
        thread = message.metadata.get("thread_ts") or None
        # Slack shows no buttons of ours: their commands, as typed here (`/memgate approve 3f2a`).
        text = message.text_with_commands()
        return await self._poster.send_pieces(message.chat_id, text, thread)

    # -- Socket Mode (called by the SDK) -----------------------------------------------------------
    async def _on_frame(self, _: AsyncBaseSocketModeClient, frame: dict[str, Any], __: Any) -> None:
        kind = frame.get("type")
        if kind == "hello":
            self._up.set()
            log.info("slack connected bot_user=%s", self._bot_user)
        elif kind == "disconnect":
            self._up.clear()  # the SDK connects again at once (Slack rotates connections)

    async def _on_close(self, _: aiohttp.WSMessage) -> None:
        self._up.clear()  # until the next connection's hello

    async def _on_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        """Take an envelope: judged and journaled with no await before it, then acknowledged."""
        if self._stopping:
            return  # not acknowledged: Slack sends it again, to the next run
        if request.type == "events_api":
            self._take(request.payload, request.retry_attempt)
        elif request.type == "slash_commands":
            ts = events.ts_text(self._sequence.next())  # the command has none of its own
            self._take({"event": events.slash_event(request.payload, self._bot_user, ts)}, None)
        await client.send_socket_mode_response(SocketModeResponse(request.envelope_id))

    def _take(self, payload: Json, retry: int | None) -> None:
        event = payload.get("event")
        if not isinstance(event, dict):
            return
        message = events.incoming(event, self._bot_user)
        if message is None:
            return
        event_id = str(payload.get("event_id") or "")
        if self._seen.check(event_id, events.message_key(message.channel, message.ts)):
            log.debug("slack event seen already event_id=%s retry=%s", event_id, retry)
            return
        mentioned = events.mentions(message.text, self._bot_user) or (
            message.thread_ts is not None and self._thread_key(message) in self._threads
        )
        request = Request(
            message.user,
            name=self._names.get(message.user, ""),
            is_group=message.is_group,
            addressed=mentioned,
        )
        decision = self._reception.judge(request)
        text = events.clean_text(message.text, self._bot_user)
        step = self._reception.step(request, decision, text)
        if step.reply is not None:
            self._tasks.spawn(self._send_pieces, self._outbound(message, step.reply))
        if step.pair:
            self._tasks.spawn(self._answer_pair, message, request, decision, text)
        if not step.turn or (not text and not message.files):
            return  # not for the agent, or nothing in it (a bare mention of the bot)
        seq = self._sequence.next()
        if self._inbox is not None:
            self._inbox.append(events.inbox_record(seq, event_id, message, text, mentioned))
        self._tasks.spawn(self._handle, seq, message, text, mentioned)

    async def _answer_pair(
        self, message: Incoming, request: Request, decision: Decision, text: str
    ) -> None:
        reply = await self._reception.answer_pair(request, decision, text)
        await self._send_pieces(self._outbound(message, reply))

    def _outbound(self, message: Incoming, text: str) -> OutboundMessage:
        meta = {"thread_ts": message.thread_ts} if message.thread_ts else {}
        return OutboundMessage(self.name, message.channel, text, metadata=meta)

    @staticmethod
    def _thread_key(message: Incoming) -> str:
        return f"{message.channel}:{message.thread_ts}"

    # -- one message -------------------------------------------------------------------------------
    async def _handle(self, seq: int, message: Incoming, text: str, mentioned: bool) -> None:
        lines: list[str] = [text] if text else []
        media: list[str] = []
        if message.files and self._session is not None:
            notes, media = await save_files(
                self._session,
                self._token,
                message.channel,
                message.ts,
                message.files,
                self._workspace,
                self._max_media_bytes,
            )
            lines += notes
        inbound = events.inbound(
            message,
            "\n".join(lines),
            name=await self._name_of(message.user),
            media=tuple(media),
            owner=self._reception.is_owner(message.user),
            mentioned=mentioned,
        )
        live = self._live(seq, message)
        if live is None:
            reply = await self._handler(inbound)
        else:
            async with live.showing():
                reply = await self._handler(inbound, stream=live)
        if reply is not None and message.thread_ts and "thread_ts" not in reply.metadata:
            reply = replace(reply, metadata={**reply.metadata, "thread_ts": message.thread_ts})
        if message.thread_ts:
            self._threads.add(self._thread_key(message))
        send: Send = self._send_pieces
        if live is not None and not live.untouched:
            send = live.finish_reply
            if reply is None:
                await live.finish(None)
        await settle(reply, partial(self._finish, seq), send)
        log.debug("slack message handled chat_id=%s replied=%s", message.channel, reply is not None)

    def _live(self, seq: int, message: Incoming) -> LiveReply | None:
        """A reply shown while written, in the messages it had shown before a restart (recorded
        in the inbox as they appear); None with streaming off."""
        if not self._streaming or self._poster is None:
            return None
        inbox = self._inbox
        if inbox is None:
            return live_reply(self._poster, message.channel, message.thread_ts, self._pacer)
        return live_reply(
            self._poster,
            message.channel,
            message.thread_ts,
            self._pacer,
            inbox.live_messages(seq),
            partial(inbox.record_live, seq),
        )

    async def _name_of(self, user: str) -> str:
        """The sender's display name (users.info, kept for the run); "" when Slack won't say."""
        if user in self._names or self._web is None:
            return self._names.get(user, "")
        try:
            info = await call(self._web.users_info, user=user, max_wait=5.0)
        except NETWORK_ERRORS as exc:
            log.debug("slack users.info failed user=%s error=%s", user, error_code(exc))
            return ""
        person = info.get("user") or {}
        profile = person.get("profile") or {}
        name = profile.get("display_name") or profile.get("real_name") or person.get("name") or ""
        self._names[user] = str(name)
        return self._names[user]

    # -- the inbox ---------------------------------------------------------------------------------
    def _open_inbox(self) -> list[Json]:
        """Open this app's inbox (blocking); the messages left unanswered last time, oldest
        first. Their events count as seen: Slack may still send one again."""
        if self._state_dir is None:
            return []
        path = self._state_dir / f"slack-{self._bot_user}-inbox.jsonl"
        self._inbox = Inbox(path, id_field="seq", label="slack")
        pending = self._inbox.open_or_log()
        for record in pending:
            keys = [events.message_key(str(record.get("channel")), str(record.get("ts")))]
            self._seen.check(str(record.get("event_id") or ""), *keys)
        if pending:
            log.info("slack answering messages left from the last run count=%d", len(pending))
        return pending

    def _finish(self, seq: int) -> None:
        if self._inbox is not None:
            self._inbox.finish(seq)

    async def _replay(self, record: Json) -> None:
        """Answer a journaled message as if it had just arrived."""
        try:
            message = events.incoming_from(record)
            seq = int(record["seq"])
        except (KeyError, TypeError, ValueError):
            log.warning("slack inbox entry unreadable, dropped entry=%s", record.get("seq"))
            self._finish(int(record.get("seq", 0)))
            return
        await self._handle(seq, message, message.text, bool(record.get("mentioned")))
