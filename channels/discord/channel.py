"""The Discord adapter: discord.py's gateway client turned into `InboundMessage`s, replies sent back.

With a `state_dir`, every accepted message is journaled in an inbox on arrival, before it waits for
its turn, and finished once handled: a message a stop or a kill left unanswered is answered at the
next start (the agent recognises one it already stored). Each message's work runs as a task of
`channels.tasks`. The `channels/discord/` modules are the only ones that import `discord`; of ours
they import `gateway.bus`, `memory.fileio` and the `channels/` root modules.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp  # discord.py's own transport; imported for its exception types only

from channels.admission import Decision, Request
from channels.base import split_message
from channels.discord.connect import (
    NETWORK_ERRORS,
    Client,
    discord,
    intents,
    point_library_at,
)
from channels.discord.live import MESSAGE_LIMIT, live_reply
from channels.discord.messages import (
    clean_content,
    inbound_from,
    inbox_record,
    keep_typing,
    mentions,
    read_attachments,
)
from channels.errors import DiscordChannelError
from channels.inbox import Inbox, Json, Send, settle
from channels.live import LiveReply, Pacer
from channels.pairing import PairingStore
from channels.reception import Reception
from channels.tasks import MessageTasks
from gateway.bus import Handler, InboundMessage, OutboundMessage
from gateway.config.models import DiscordConfig

log = logging.getLogger(__name__)

_LOGIN_TIMEOUT = 30.0
_SEND_TIMEOUT = 90.0  # above max_ratelimit_timeout, so a honoured 429 does not count as a failure
_MAX_RATELIMIT_WAIT = 60.0  # a longer retry_after fails the send instead of stalling the reply
_LOGIN_BACKOFF = (1.0, 60.0)  # first and largest delay between login attempts
_ACCEPTED_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


class DiscordChannel:
    """A Discord bot: DMs, guild channels per `group_policy`, and threads, each its own session."""

    name = "discord"

    def __init__(
        self,
        handler: Handler,
        settings: DiscordConfig,
        *,
        workspace: Path,
        state_dir: Path | None = None,
        pairing: PairingStore | None = None,
        shutdown_grace: float = 0.0,
        guild_ready_timeout: float = 2.0,
        max_media_bytes: int = 25 * 1024 * 1024,
    ) -> None:
        """`settings` come validated (URLs); the token, whose variable commands such as
        `memgate init` may leave unset, is checked here."""
        if not settings.token.strip():
            raise DiscordChannelError("channels.discord.token: must not be empty")
        self._handler = handler
        self._streaming = settings.streaming == "on"
        self._pacer = Pacer()  # live replies: one call a second per channel
        self._token = settings.token.strip()
        self._reception = Reception(self.name, settings, pairing)
        self._api_base = settings.api_base.rstrip("/")
        self._gateway_url = settings.gateway_url
        self._workspace = Path(workspace)
        self._guild_ready_timeout = guild_ready_timeout
        self._max_media_bytes = max_media_bytes
        self._shutdown_grace = shutdown_grace
        self._client: Client | None = None
        self._started = False
        self._up = asyncio.Event()  # set while connected
        self._tasks = MessageTasks(self.name)
        self._stopping = False
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._inbox: Inbox | None = None

    def __repr__(self) -> str:  # the default would be harmless too, but never risk the token
        policy = self._reception.gate.rules.group_policy
        return f"<DiscordChannel group_policy={policy} connected={self.connected}>"

    @property
    def connected(self) -> bool:
        """True between READY (or RESUMED) and the next disconnect."""
        return self._up.is_set()

    @property
    def ready(self) -> asyncio.Event:
        """Set while connected: what a message due at start (a reminder) waits on."""
        return self._up

    def set_access(self, *, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        """Replace who may talk to the bot; the next message is judged by the new settings."""
        self._reception.set_access(allow_from, dm_policy, group_policy)

    async def run(self) -> None:
        """Log in and serve the gateway until cancelled; reconnects and resumes are discord.py's.

        On cancellation no new message is taken; turns already running get `shutdown_grace`
        seconds to finish and send their replies, then they are cancelled and the client closes.
        """
        if self._started:
            raise RuntimeError("DiscordChannel.run() was already started")
        self._started = True
        point_library_at(self._api_base, self._gateway_url)
        try:
            async with self._tasks.running(self._shutdown_grace):
                try:
                    client = await self._login()
                    for record in await asyncio.to_thread(self._open_inbox, client):
                        self._tasks.spawn(self._replay, record)
                    await client.connect(reconnect=True)
                finally:
                    self._up.clear()
                    self._stopping = True  # no new message; running turns get the grace
        except discord.PrivilegedIntentsRequired as exc:
            raise DiscordChannelError(
                "Discord refused the MESSAGE CONTENT intent: enable it for this bot in the "
                "Developer Portal (Bot → Privileged Gateway Intents)"
            ) from exc
        except discord.ConnectionClosed as exc:
            reason = "the token was rejected" if exc.code == 4004 else "unrecoverable close"
            raise DiscordChannelError(
                f"Discord closed the gateway connection code={exc.code} ({reason})"
            ) from exc
        finally:
            await self._close_client()
            if self._inbox is not None:
                self._inbox.close()

    async def send(self, message: OutboundMessage) -> bool:
        """Send `message` split below 2000 characters; a failure is logged, never raised.

        True when every piece was sent (a scheduled job retries on False). The reply is no longer
        owed once Discord took it or it was given up and logged; only a send while the channel is
        not connected leaves it owed, for the next start.
        """
        outcome = await self._send_pieces(message)
        if outcome is not None:
            await message.sent()
        return bool(outcome)

    async def _send_pieces(self, message: OutboundMessage) -> bool | None:
        """Send the pieces: True all sent, False given up (logged), None not connected."""
        client = self._client
        if client is None or client.is_closed():
            log.warning("discord send while not running chat_id=%s", message.chat_id)
            return None
        try:
            channel = client.get_partial_messageable(int(message.chat_id))
            reference = (
                channel.get_partial_message(int(message.reply_to)).to_reference(
                    fail_if_not_exists=False
                )
                if message.reply_to
                else None
            )
        except ValueError:
            log.error(
                "discord send to a malformed id chat_id=%s reply_to=%s",
                message.chat_id,
                message.reply_to,
            )
            return False
        pieces = split_message(message.text_with_commands(), MESSAGE_LIMIT)  # no buttons here
        for index, piece in enumerate(pieces):
            try:
                async with asyncio.timeout(_SEND_TIMEOUT):
                    # Only the first piece answers the message; the rest follow it.
                    options: dict[str, Any] = {"reference": reference} if index == 0 else {}
                    if message.reply_id:
                        # discord.py sends it with enforce_nonce: Discord returns the message it
                        # already made for this nonce (within minutes) instead of a second one.
                        options["nonce"] = piece_nonce(message.reply_id, index)
                    await channel.send(piece, **options)
            except NETWORK_ERRORS as exc:
                # Stop here: the rest of a reply without its middle would mislead.
                log.error(
                    "discord send failed chat_id=%s piece=%d/%d error=%r",
                    message.chat_id,
                    index + 1,
                    len(pieces),
                    exc,
                )
                return False
        return True

    # -- gateway events (called by the client) --------------------------------------------------------

    def on_connected(self, connected: bool, event: str) -> None:
        if connected:
            self._up.set()
        else:
            self._up.clear()
        user = self._client.user if self._client else None
        log.info("discord %s bot_id=%s", event, user.id if user else "-")

    def on_message(self, message: discord.Message) -> None:
        """Decide without awaiting whether a message is ours; start a task for each one that is."""
        me = self._client.user if self._client else None
        author = message.author
        if (
            self._stopping
            or me is None
            or author.bot
            or author.id == me.id
            or message.type not in _ACCEPTED_TYPES
        ):
            return
        mentioned = mentions(message, me.id)
        # Ids only (no username): Discord usernames can be given up and claimed by someone else.
        request = Request(
            str(author.id),
            name=author.display_name,
            is_group=message.guild is not None,
            addressed=mentioned,
        )
        decision = self._reception.judge(request)
        chat_id, text = str(message.channel.id), clean_content(message, me.id)
        step = self._reception.step(request, decision, text)
        if step.reply is not None:
            self._tasks.spawn(self.send, OutboundMessage(self.name, chat_id, step.reply))
        if step.pair:
            self._tasks.spawn(self._answer_pair, message, request, decision, text)
        if not step.turn or (not text and not message.attachments):
            return  # not for the agent, or nothing in it (a bare mention of the bot)
        if self._inbox is not None:
            self._inbox.append(inbox_record(message, text, mentioned))
        # Each message in its own task, so `/stop` can arrive while a turn is running.
        self._tasks.spawn(self._handle, message, text, mentioned)

    async def _answer_pair(
        self, message: discord.Message, request: Request, decision: Decision, text: str
    ) -> None:
        reply = await self._reception.answer_pair(request, decision, text)
        await self.send(OutboundMessage(self.name, str(message.channel.id), reply))

    # -- one message -------------------------------------------------------------------------------

    async def _handle(self, message: discord.Message, text: str, mentioned: bool) -> None:
        chat_id = str(message.channel.id)
        live = self._live(message.channel.id, message.id, message.guild is not None)
        async with asyncio.TaskGroup() as group:
            typing = group.create_task(keep_typing(message.channel))
            reply = await self._call_handler(message, text, mentioned, live)
            typing.cancel()
        await self._settle(reply, live, message.id)
        # The agent logs the one INFO line per message; this detail is for debugging.
        log.debug(
            "discord message handled chat_id=%s sender_id=%s replied=%s",
            chat_id,
            message.author.id,
            reply is not None,
        )

    async def _settle(
        self, reply: OutboundMessage | None, live: LiveReply | None, message_id: int
    ) -> None:
        """Send the reply (in place of what a live reply showed) and finish the inbox entry."""
        send: Send = self._send_pieces
        if live is not None and not live.untouched:
            send = live.finish_reply
            if reply is None:
                await live.finish(None)
        await settle(reply, lambda: self._finish(message_id), send)

    def _live(self, chat_id: int, message_id: int, in_guild: bool) -> LiveReply | None:
        """A reply shown while written in the message's channel, in the messages it had shown
        before a restart if any (recorded in the inbox as they appear); None with streaming off
        or while not connected."""
        client = self._client
        if not self._streaming or client is None or client.is_closed():
            return None
        channel = client.get_partial_messageable(chat_id)
        # As for a whole reply: in a guild the answer refers to the question, in a DM not.
        question = channel.get_partial_message(message_id)
        reference = question.to_reference(fail_if_not_exists=False) if in_guild else None
        inbox = self._inbox
        if inbox is None:
            return live_reply(channel, reference, self._pacer)
        shown = inbox.live_messages(message_id)
        return live_reply(
            channel, reference, self._pacer, shown, partial(inbox.record_live, message_id)
        )

    async def _call_handler(
        self, message: discord.Message, text: str, mentioned: bool, live: LiveReply | None
    ) -> OutboundMessage | None:
        """Build the inbound message and run the handler (which answers its own errors)."""
        text, media = await read_attachments(message, text, self._workspace, self._max_media_bytes)
        inbound = InboundMessage(
            channel=self.name,
            chat_id=str(message.channel.id),  # DM channel, guild channel or thread
            sender_id=str(message.author.id),
            text=text,
            sender_name=message.author.display_name,
            media=media,
            is_group=message.guild is not None,
            sender_is_owner=self._reception.is_owner(str(message.author.id)),
            mentioned=mentioned,
            message_id=str(message.id),
        )
        return await self._answer(inbound, live)

    async def _answer(
        self, inbound: InboundMessage, live: LiveReply | None
    ) -> OutboundMessage | None:
        if live is None:
            return await self._handler(inbound)
        async with live.showing():
            return await self._handler(inbound, stream=live)

    # -- the inbox -----------------------------------------------------------------------------------

    def _open_inbox(self, client: Client) -> list[Json]:
        """Open this bot's inbox (blocking); the messages left unanswered last time, oldest first."""
        if self._state_dir is None or client.user is None:
            return []
        path = self._state_dir / f"discord-{client.user.id}-inbox.jsonl"
        self._inbox = Inbox(path, id_field="message_id", label="discord")
        pending = self._inbox.open_or_log()
        if pending:
            log.info("discord answering messages left from the last run count=%d", len(pending))
        return pending

    def _finish(self, message_id: int) -> None:
        if self._inbox is not None:
            self._inbox.finish(message_id)

    async def _replay(self, record: Json) -> None:
        """Answer a journaled message as if it had just arrived (its files are only named)."""
        try:
            inbound = inbound_from(record)
        except (KeyError, TypeError, ValueError):
            log.warning(
                "discord inbox entry unreadable, dropped entry=%s", record.get("message_id")
            )
            self._finish(int(record.get("message_id", 0)))
            return
        message_id = int(record["message_id"])
        # Sent whole, unless a kill left the answer half-written in messages: it goes on there.
        live = None
        if self._inbox is not None and self._inbox.live_messages(message_id):
            live = self._live(int(inbound.chat_id), message_id, inbound.is_group)
        await self._settle(await self._answer(inbound, live), live, message_id)

    async def _login(self) -> Client:
        """Log in, retrying network trouble and Discord outages with backoff; a bad token is fatal.

        Each attempt gets a fresh client: a discord.py client whose login failed cannot log in again.
        """
        attempt = 0
        while True:
            client = self._client = Client(
                self,
                intents=intents(),
                guild_ready_timeout=self._guild_ready_timeout,
                chunk_guilds_at_startup=False,
                max_ratelimit_timeout=_MAX_RATELIMIT_WAIT,
                # The LLM writes the replies: never let it ping @everyone or a role.
                allowed_mentions=discord.AllowedMentions(everyone=False, roles=False),
            )
            try:
                async with asyncio.timeout(_LOGIN_TIMEOUT):
                    await client.login(self._token)
                return client
            except discord.LoginFailure as exc:
                raise DiscordChannelError(
                    "Discord rejected the bot token (channels.discord.token)"
                ) from exc
            except (OSError, aiohttp.ClientError, TimeoutError, discord.DiscordServerError) as exc:
                first, largest = _LOGIN_BACKOFF
                delay = min(largest, first * 2**attempt) * random.uniform(0.5, 1.0)
                attempt += 1
                log.warning(
                    "discord login failed attempt=%d error=%s retry_in=%.1fs",
                    attempt,
                    type(exc).__name__,
                    delay,
                )
            except discord.HTTPException as exc:
                raise DiscordChannelError(
                    f"Discord refused the login status={exc.status} ({exc.text or 'no reason'})"
                ) from exc
            await self._close_client()
            await asyncio.sleep(delay)

    async def _close_client(self) -> None:
        if self._client is None:
            return
        try:
            async with asyncio.timeout(10):
                await self._client.close()
        except TimeoutError:
            log.warning("discord client did not close within 10s")


def piece_nonce(reply_id: str, index: int) -> str:
    """The nonce of piece `index` of a stored answer: the same on every resend (at most 25
    characters, Discord's limit)."""
    return f"{reply_id[:20]}-{index}"[:25]
