"""The Discord adapter: discord.py's gateway client turned into `InboundMessage`s, replies sent back.

The only module that imports `discord`; of ours it imports `gateway.bus`, `memory.fileio` and
the channels' own helpers. With a `state_dir`, every accepted message is journaled in an inbox on
arrival, before it waits for its turn, and finished once handled: a message a stop or a kill left
unanswered is answered at the next start (the agent recognises one it already stored).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import warnings
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any

import aiohttp  # discord.py's own transport; imported for its exception types only
import yarl

from channels.admission import Gate, Request, Rules, Verdict
from channels.base import ChannelConfigError, is_pair_command, split_message
from channels.inbox import Inbox, Json
from channels.pairing import PairingError, PairingStore, pair_command, stranger_reply
from gateway.bus import Handler, InboundMessage, OutboundMessage, media_folder
from memory.fileio import atomic_write

with warnings.catch_warnings():
    # discord.py imports the stdlib `audioop` for voice, which memgate never uses; Python 3.11 and
    # 3.12 warn that it is deprecated, and the test suite turns warnings into errors.
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

log = logging.getLogger(__name__)

# memgate has no voice support to miss; without this every start logs two warnings about it.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False

MESSAGE_LIMIT = 2000  # characters per Discord message

_DISCORD_GATEWAY = DiscordWebSocket.DEFAULT_GATEWAY  # captured before anyone points it elsewhere
_TYPING_EVERY = 8.0  # Discord shows "typing…" for about 10 s per request
_LOGIN_TIMEOUT = 30.0
_DOWNLOAD_TIMEOUT = 60.0
_SEND_TIMEOUT = 90.0  # above max_ratelimit_timeout, so a honoured 429 does not count as a failure
_MAX_RATELIMIT_WAIT = 60.0  # a longer retry_after fails the send instead of stalling the reply
_LOGIN_BACKOFF = (1.0, 60.0)  # first and largest delay between login attempts
_ACCEPTED_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
_NETWORK_ERRORS = (discord.DiscordException, OSError, aiohttp.ClientError, TimeoutError)
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class DiscordChannelError(ChannelConfigError):
    """Discord refuses to serve this bot (bad token, intent not enabled); retrying will not help."""


class DiscordChannel:
    """A Discord bot: DMs, guild channels per `group_policy`, and threads, each its own session."""

    name = "discord"

    def __init__(
        self,
        handler: Handler,
        *,
        token: str,
        allow_from: Iterable[str],
        group_policy: str = "mention",
        dm_policy: str = "allowlist",
        pairing: PairingStore | None = None,
        api_base: str = "https://discord.com/api/v10",
        gateway_url: str | None = None,
        workspace: Path,
        guild_ready_timeout: float = 2.0,
        max_media_bytes: int = 25 * 1024 * 1024,
        shutdown_grace: float = 0.0,
        state_dir: Path | None = None,
    ) -> None:
        if not token or not token.strip():
            raise ValueError("channels.discord.token must not be empty")
        if not api_base.startswith(("http://", "https://")):
            raise ValueError(f"channels.discord.api_base must be an http(s) URL, got {api_base!r}")
        if gateway_url is not None and not gateway_url.startswith(("ws://", "wss://")):
            raise ValueError(
                f"channels.discord.gateway_url must be a ws(s) URL, got {gateway_url!r}"
            )
        self._handler = handler
        self._token = token.strip()
        self._pairing = pairing
        self.set_access(allow_from=allow_from, dm_policy=dm_policy, group_policy=group_policy)
        self._api_base = api_base.rstrip("/")
        self._gateway_url = gateway_url
        self._workspace = Path(workspace)
        self._guild_ready_timeout = guild_ready_timeout
        self._max_media_bytes = max_media_bytes
        self._shutdown_grace = shutdown_grace
        self._client: _Client | None = None
        self._started = False
        self._connected = False
        self._inflight: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._inbox: Inbox | None = None

    def __repr__(self) -> str:  # the default would be harmless too, but never risk the token
        return f"<DiscordChannel group_policy={self._gate.rules.group_policy} connected={self._connected}>"

    @property
    def connected(self) -> bool:
        """True between READY (or RESUMED) and the next disconnect."""
        return self._connected

    def set_access(self, *, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        """Replace who may talk to the bot; the next message is judged by the new settings."""
        rules = Rules.build(
            self.name, allow_from, dm_policy, group_policy, pairing=self._pairing is not None
        )
        self._gate = Gate(rules)

    async def run(self) -> None:
        """Log in and serve the gateway until cancelled; reconnects and resumes are discord.py's.

        On cancellation no new message is taken; turns already running get `shutdown_grace`
        seconds to finish and send their replies, then they are cancelled and the client closes.
        """
        if self._started:
            raise RuntimeError("DiscordChannel.run() was already started")
        self._started = True
        _point_library_at(self._api_base, self._gateway_url)
        try:
            client = await self._login()
            for record in await asyncio.to_thread(self._open_inbox, client):
                self._track(self._replay(record), f"discord replay {record['message_id']}")
            await client.connect(reconnect=True)
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
            self._connected = False
            self._stopping = True
            try:
                await self._drain()
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
        pieces = split_message(message.text, MESSAGE_LIMIT)
        for index, piece in enumerate(pieces):
            try:
                async with asyncio.timeout(_SEND_TIMEOUT):
                    # Only the first piece answers the message; the rest follow it.
                    options: dict[str, Any] = {"reference": reference} if index == 0 else {}
                    await channel.send(piece, **options)
            except _NETWORK_ERRORS as exc:
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

    # -- gateway events (called by _Client) --------------------------------------------------------

    def _on_connected(self, connected: bool, event: str) -> None:
        self._connected = connected
        user = self._client.user if self._client else None
        log.info("discord %s bot_id=%s", event, user.id if user else "-")

    def _accept(self, message: discord.Message) -> None:
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
        mentioned = _mentions(message, me.id)
        sender_id = str(author.id)
        is_group = message.guild is not None
        # Ids only: Discord usernames can be given up and claimed by someone else.
        decision = self._gate.judge(
            Request(
                sender_id,
                name=author.name,
                is_group=is_group,
                addressed=mentioned,
                approved=not is_group
                and self._pairing is not None
                and self._pairing.is_approved(self.name, sender_id),
            )
        )
        if decision.verdict is Verdict.PAIR:
            self._answer_stranger(message)
        if decision.verdict is not Verdict.ADMIT:
            return
        text = _clean_content(message, me.id)
        if not text and not message.attachments:
            return  # e.g. a bare mention of the bot
        if not is_group and is_pair_command(text) and self._pairing is not None:
            self._track(
                self._answer_pair(message, decision.owner, text), f"discord pair {message.id}"
            )
            return
        if self._inbox is not None:
            self._inbox.append(_record(message, text, mentioned))
        # Each message in its own task, so `/stop` can arrive while a turn is running.
        self._track(self._handle(message, text, mentioned), f"discord {message.id}")

    def _track(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._inflight.add(task)
        task.add_done_callback(self._forget)

    def _answer_stranger(self, message: discord.Message) -> None:
        """Give a stranger their pairing code, at most once per REPLY_EVERY; nothing is kept.

        Decided here, in arrival order, so a burst of DMs gets one reply, not one per message;
        the file is written only when a reply is due (a few times an hour at most)."""
        assert self._pairing is not None
        author = message.author
        try:
            answer = self._pairing.request(self.name, str(author.id), author.display_name)
        except PairingError as exc:
            log.error("discord pairing failed sender_id=%s: %s", author.id, exc)
            return
        if answer.reply and answer.code:
            reply = OutboundMessage(self.name, str(message.channel.id), stranger_reply(answer.code))
            self._track(self._send_quietly(reply), f"discord pairing {message.id}")

    async def _send_quietly(self, reply: OutboundMessage) -> None:
        """A reply nobody waits on (its failure is logged by send)."""
        await self.send(reply)

    async def _answer_pair(self, message: discord.Message, owner: bool, text: str) -> None:
        assert self._pairing is not None
        sender_id = str(message.author.id)
        store = self._pairing
        reply = await asyncio.to_thread(pair_command, store, self.name, sender_id, owner, text)
        await self.send(OutboundMessage(self.name, str(message.channel.id), reply))

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("discord message task failed task=%s", task.get_name(), exc_info=exc)

    # -- one message -------------------------------------------------------------------------------

    async def _handle(self, message: discord.Message, text: str, mentioned: bool) -> None:
        chat_id = str(message.channel.id)
        async with asyncio.TaskGroup() as group:
            typing = group.create_task(_keep_typing(message.channel))
            reply = await self._call_handler(message, text, mentioned)
            typing.cancel()
        if reply is None or reply.on_sent is None:
            # Nothing stored to send again (a command's answer, an apology): finished before the
            # send, so a kill never makes a replay run a command such as /new twice.
            self._finish(message.id)
        if reply is not None:
            await self._send_pieces(reply)
        # Finished at once when the reply is out (a kill keeps a written line), then the reply
        # is marked delivered: a kill between the two costs no repeat.
        self._finish(message.id)
        if reply is not None:
            await reply.sent()
        # The agent logs the one INFO line per message; this detail is for debugging.
        log.debug(
            "discord message handled chat_id=%s sender_id=%s replied=%s",
            chat_id,
            message.author.id,
            reply is not None,
        )

    async def _call_handler(
        self, message: discord.Message, text: str, mentioned: bool
    ) -> OutboundMessage | None:
        """Build the inbound message and run the handler; errors are logged, not raised."""
        try:
            text, media = await self._with_attachments(message, text)
            inbound = InboundMessage(
                channel=self.name,
                chat_id=str(message.channel.id),  # DM channel, guild channel or thread
                sender_id=str(message.author.id),
                text=text,
                sender_name=message.author.display_name,
                media=media,
                is_group=message.guild is not None,
                sender_is_owner=self._gate.is_owner(str(message.author.id)),
                mentioned=mentioned,
                message_id=str(message.id),
            )
            return await self._handler(inbound)
        except Exception:
            log.exception(
                "discord handler failed chat_id=%s message_id=%s", message.channel.id, message.id
            )
            return None

    async def _with_attachments(
        self, message: discord.Message, text: str
    ) -> tuple[str, tuple[str, ...]]:
        """Download the attachments; the text with one line per attachment, and their paths."""
        lines = [text] if text else []
        media: list[str] = []
        for attachment in message.attachments:
            kind = _attachment_kind(attachment.content_type)
            path = await self._save(message, attachment)
            if path is None:
                lines.append(f"[{kind}: {attachment.filename} (not downloaded)]")
            else:
                media.append(path)
                lines.append(f"[{kind}: {path}]")
        return "\n".join(lines), tuple(media)

    async def _save(self, message: discord.Message, attachment: discord.Attachment) -> str | None:
        """Download an attachment under media/discord/<chat>/; the workspace-relative path, or None."""
        if attachment.size > self._max_media_bytes:
            log.warning(
                "discord attachment over the size cap message_id=%s size=%d cap=%d",
                message.id,
                attachment.size,
                self._max_media_bytes,
            )
            return None
        try:
            async with asyncio.timeout(_DOWNLOAD_TIMEOUT):
                data = await attachment.read()
        except _NETWORK_ERRORS as exc:
            log.warning(
                "discord attachment download failed message_id=%s error=%r", message.id, exc
            )
            return None
        if len(data) > self._max_media_bytes:
            return None
        # One folder per chat: a chat's scope reaches its own attachments and no one else's.
        folder = media_folder(self.name, str(message.channel.id))
        relative = f"{folder}/{message.id}-{attachment.id}-{_safe_name(attachment.filename)}"
        try:
            await asyncio.to_thread(atomic_write, self._workspace / relative, data)
        except OSError as exc:
            log.error("discord attachment not saved path=%s error=%r", relative, exc)
            return None
        return relative

    # -- the inbox -----------------------------------------------------------------------------------

    def _open_inbox(self, client: _Client) -> list[Json]:
        """Open this bot's inbox (blocking); the messages left unanswered last time, oldest first."""
        if self._state_dir is None or client.user is None:
            return []
        path = self._state_dir / f"discord-{client.user.id}-inbox.jsonl"
        self._inbox = Inbox(path, id_field="message_id", label="discord")
        try:
            pending = self._inbox.open()
        except OSError as exc:
            log.error("discord inbox unavailable path=%s error=%s", path, exc)
            self._inbox = None
            return []
        if pending:
            log.info("discord answering messages left from the last run count=%d", len(pending))
        return pending

    def _finish(self, message_id: int) -> None:
        if self._inbox is not None:
            self._inbox.finish(message_id)

    async def _replay(self, record: Json) -> None:
        """Answer a journaled message as if it had just arrived (its files are only named)."""
        try:
            inbound = _inbound_from(record)
        except (KeyError, TypeError, ValueError):
            log.warning(
                "discord inbox entry unreadable, dropped entry=%s", record.get("message_id")
            )
            self._finish(int(record.get("message_id", 0)))
            return
        try:
            reply = await self._handler(inbound)
        except Exception:
            log.exception(
                "discord handler failed on a replayed message chat_id=%s", inbound.chat_id
            )
            reply = None
        if reply is None or reply.on_sent is None:
            self._finish(int(record["message_id"]))  # as in _handle: no command runs twice
        if reply is not None:
            await self._send_pieces(reply)
        self._finish(int(record["message_id"]))
        if reply is not None:
            await reply.sent()

    async def _login(self) -> _Client:
        """Log in, retrying network trouble and Discord outages with backoff; a bad token is fatal.

        Each attempt gets a fresh client: a discord.py client whose login failed cannot log in again.
        """
        attempt = 0
        while True:
            client = self._client = _Client(
                self,
                intents=_intents(),
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

    async def _drain(self) -> None:
        """Let running turns finish within the grace period, then cancel what is left."""
        if self._inflight and self._shutdown_grace > 0:
            log.info(
                "discord waiting for running turns count=%d grace=%.1fs",
                len(self._inflight),
                self._shutdown_grace,
            )
            await asyncio.wait(set(self._inflight), timeout=self._shutdown_grace)
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)

    async def _close_client(self) -> None:
        if self._client is None:
            return
        try:
            async with asyncio.timeout(10):
                await self._client.close()
        except TimeoutError:
            log.warning("discord client did not close within 10s")


class _Client(discord.Client):
    """discord.py's client with its events forwarded to the channel."""

    def __init__(self, channel: DiscordChannel, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self._channel = channel

    async def on_ready(self) -> None:
        self._channel._on_connected(True, "ready")

    async def on_resumed(self) -> None:
        self._channel._on_connected(True, "resumed")

    async def on_disconnect(self) -> None:
        self._channel._on_connected(False, "disconnected")

    async def on_message(self, message: discord.Message) -> None:
        self._channel._accept(message)


def _point_library_at(api_base: str, gateway_url: str | None) -> None:
    """Aim discord.py's REST calls and gateway connection at the configured endpoints.

    Both are class attributes in discord.py, so this is process-wide: every client in the process
    uses the values set last. memgate runs one Discord client per process, and tests run them one
    after another, each setting both values before it logs in.
    """
    Route.BASE = api_base
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url) if gateway_url else _DISCORD_GATEWAY


def _intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True  # the guild, channel and thread cache
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True  # privileged: switched on per bot in the Developer Portal
    return intents


def _mentions(message: discord.Message, me_id: int) -> bool:
    """True if the message mentions the bot, its role, or replies to one of its messages."""
    if me_id in message.raw_mentions or any(user.id == me_id for user in message.mentions):
        return True
    role = message.guild.self_role if message.guild is not None else None
    if role is not None and role.id in message.raw_role_mentions:
        return True
    resolved = message.reference.resolved if message.reference is not None else None
    return isinstance(resolved, discord.Message) and resolved.author.id == me_id


def _clean_content(message: discord.Message, me_id: int) -> str:
    """The content with the bot's own mentions removed and other users' shown by name."""
    text = re.sub(rf"<@!?{me_id}>\s?", "", message.content)
    role = message.guild.self_role if message.guild is not None else None
    if role is not None:
        text = re.sub(rf"<@&{role.id}>\s?", "", text)
    for user in message.mentions:
        if user.id != me_id:
            name = f"@{user.display_name}"
            text = text.replace(f"<@{user.id}>", name).replace(f"<@!{user.id}>", name)
    return text.strip()


async def _keep_typing(channel: discord.abc.Messageable) -> None:
    """Show the typing indicator until cancelled; a failure only costs the indicator."""
    while True:
        try:
            async with asyncio.timeout(_TYPING_EVERY):
                await channel.typing()
        except _NETWORK_ERRORS as exc:
            log.debug("discord typing failed error=%r", exc)
        await asyncio.sleep(_TYPING_EVERY)


def _record(message: discord.Message, text: str, mentioned: bool) -> Json:
    """What the inbox keeps of a message: enough to answer it after a restart."""
    return {
        "message_id": message.id,
        "chat_id": str(message.channel.id),
        "sender_id": str(message.author.id),
        "sender_name": message.author.display_name,
        "text": text,
        "group": message.guild is not None,
        "mentioned": mentioned,
        "attachments": [[a.filename, a.content_type] for a in message.attachments],
    }


def _inbound_from(record: Json) -> InboundMessage:
    """The inbound message of a journaled record; attachments are named, not downloaded again."""
    lines = [str(record["text"])] if record["text"] else []
    for filename, content_type in record.get("attachments", []):
        kind = _attachment_kind(content_type)
        lines.append(f"[{kind}: {filename} (not downloaded: received before a restart)]")
    return InboundMessage(
        channel=DiscordChannel.name,
        chat_id=str(record["chat_id"]),
        sender_id=str(record["sender_id"]),
        text="\n".join(lines),
        sender_name=str(record.get("sender_name") or ""),
        is_group=bool(record.get("group")),
        mentioned=bool(record.get("mentioned")),
        message_id=str(record["message_id"]),
    )


def _attachment_kind(content_type: str | None) -> str:
    major = (content_type or "").split("/", 1)[0]
    return major if major in ("image", "audio", "video") else "file"


def _safe_name(filename: str) -> str:
    """A file name that cannot climb out of media/ or surprise a shell."""
    name = _UNSAFE_NAME.sub("_", filename).strip("._")[-80:]
    return name or "file"


_PROBE_TIMEOUT = 15.0  # seconds for `memgate doctor`'s whole check


async def probe_discord(*, token: str, api_base: str) -> str:
    """`memgate doctor`: log in over REST and read the application's intent flags, in one line.

    Raises DiscordChannelError when the token is refused or MESSAGE CONTENT is not enabled.
    """
    _point_library_at(api_base, None)
    client = discord.Client(intents=_intents())
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT):
            await client.login(token)
            info = await client.application_info()
    except discord.LoginFailure:
        raise DiscordChannelError(
            "Discord rejected the bot token (channels.discord.token)"
        ) from None
    except (OSError, aiohttp.ClientError, TimeoutError, discord.HTTPException) as exc:
        raise DiscordChannelError(f"Discord API not reachable ({type(exc).__name__})") from None
    finally:
        await client.close()
    flags = info.flags
    if not (flags.gateway_message_content or flags.gateway_message_content_limited):
        raise DiscordChannelError(
            "the MESSAGE CONTENT intent is off: enable it in the Developer Portal "
            "(Bot → Privileged Gateway Intents)"
        )
    user = client.user
    return f"logged in as {user.name if user else info.name}, MESSAGE CONTENT intent on"
