"""The Telegram channel: python-telegram-bot long polling (or a webhook) in, HTML replies out.

Every update is journaled in the inbox (channels/inbox.py) before Telegram hears that it
arrived, and replayed at the next start if the process died before handling it.

The only module that imports `telegram`; of ours it imports only `gateway.bus` and `channels`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib.util
import json
import logging
import random
import re
import secrets
import warnings
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httpx
from telegram import Bot, BotCommand, Message, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatAction, ChatType, ParseMode
from telegram.error import BadRequest, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler
from telegram.request import HTTPXRequest

from channels.admission import Gate, Request, Rules, Verdict
from channels.base import ChannelConfigError, is_pair_command
from channels.inbox import Inbox, Json
from channels.pairing import PairingError, PairingStore, pair_command, stranger_reply
from channels.telegram_html import Piece, render_pieces
from gateway.bus import Handler, InboundMessage, OutboundMessage, media_folder
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

MAX_DOWNLOAD = 20 * 1024 * 1024  # the Bot API serves no larger file
TYPING_EVERY = 4.0  # Telegram shows "typing…" for about 5 s per sendChatAction
MAX_FLOOD_WAIT = 60.0  # a longer retry_after drops the piece rather than stall the chat
SEND_ATTEMPTS = 3  # tries of a send that failed without reaching Telegram, or with a 5xx
SEND_BACKOFF = 1.0  # seconds before the second try, doubled for each later one (with jitter)
POLL_TIMEOUT = 30  # seconds a getUpdates long poll is held open
ALLOWED_UPDATES = (Update.MESSAGE,)
COMMANDS = (
    ("new", "Start a new session"),
    ("stop", "Stop the reply in progress"),
    ("status", "Session and memory status"),
    ("jobs", "Scheduled jobs of this chat"),
    ("help", "What I can do"),
)
GREETING = "Hi! I'm your memgate assistant: just write to me. /help lists the commands."
UNSUPPORTED = "I can only read text, photos, voice messages and files."
_GROUPS = (ChatType.GROUP, ChatType.SUPERGROUP)
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class TelegramConfigError(ChannelConfigError, ValueError):
    """A setting Telegram or this install cannot serve: a refused token, a bad value, no webhooks."""


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a conversation's replies go: a chat, and a forum topic in it."""

    chat_id: int
    thread_id: int | None = None


class TelegramChannel:
    """A Telegram bot serving allowed users, owning the python-telegram-bot lifecycle in `run()`."""

    name = "telegram"

    def __init__(
        self,
        handler: Handler,
        *,
        token: str,
        allow_from: Iterable[str],
        group_policy: str = "mention",
        dm_policy: str = "allowlist",
        pairing: PairingStore | None = None,
        base_url: str = "https://api.telegram.org/bot",
        base_file_url: str | None = None,
        workspace: Path,
        state_dir: Path,
        webhook_url: str | None = None,
        webhook_listen: str = "127.0.0.1:8443",
        webhook_secret: str | None = None,
        shutdown_grace: float = 10.0,
    ) -> None:
        if not token or ":" not in token:
            raise TelegramConfigError(
                "channels.telegram.token: expected a BotFather token like 123:ABC…"
            )
        self._handler = handler
        self._token = token
        self._pairing = pairing
        self.set_access(allow_from=allow_from, dm_policy=dm_policy, group_policy=group_policy)
        self._base_url = base_url
        self._base_file_url = base_file_url or _file_url(base_url)
        self._workspace = Path(workspace)
        self._state_dir = Path(state_dir)
        self._webhook_url = webhook_url
        self._listen = _parse_listen(webhook_listen)
        self._webhook_secret = webhook_secret or secrets.token_urlsafe(32)
        self._grace = shutdown_grace
        if webhook_url and importlib.util.find_spec("tornado") is None:
            raise TelegramConfigError("channels.telegram.webhook_url: webhook mode needs "
                             "python-telegram-bot[webhooks] (tornado) installed")  # fmt: skip
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._started = False
        self._connected = False
        self._bot_id = int(token.split(":", 1)[0]) if token.split(":", 1)[0].isdigit() else 0
        self._bot_username = ""
        self._last_update_id = 0
        self._last_date = 0  # Telegram's date of the newest handled message, epoch seconds
        self._tasks: asyncio.TaskGroup | None = None
        self._active: set[asyncio.Task[None]] = set()
        self._tails: dict[_Target, asyncio.Event] = {}
        self._typing: dict[_Target, list[Any]] = {}
        self._flood_until = 0.0
        self._send_locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)  # per chat
        self._inbox: Inbox | None = None

    @property
    def connected(self) -> bool:
        return self._connected

    def set_access(self, *, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        """Replace who may talk to the bot; the next message is judged by the new settings."""
        rules = Rules.build(
            self.name, allow_from, dm_policy, group_policy, pairing=self._pairing is not None
        )
        self._gate = Gate(rules)

    # -- lifecycle --------------------------------------------------------------------------------
    async def run(self) -> None:
        """Connect, serve updates until cancelled, then stop polling and close, in that order."""
        if self._started:
            raise RuntimeError("TelegramChannel.run() was already started")
        self._started = True
        restore = _TokenFilter(self._token).install()
        # Our own request objects, so their connections close even when initialize() failed.
        requests = (HTTPXRequest(connection_pool_size=64), _UpdatesRequest(connection_pool_size=1))
        app = (
            ApplicationBuilder()
            .token(self._token)
            .base_url(self._base_url)
            .base_file_url(self._base_file_url)
            .request(requests[0])
            .get_updates_request(requests[1])
            .update_queue(_UpdateQueue(self._receive))
            .concurrent_updates(False)  # the callback only admits and queues; turns run as tasks
            .build()
        )
        app.add_handler(TypeHandler(Update, self._on_update))
        self._app = app
        try:
            await _retrying("connect", app.initialize)
            self._bot_id, self._bot_username = app.bot.id, app.bot.username or ""
            await asyncio.to_thread(self._load_state)
            pending = await asyncio.to_thread(self._open_inbox)
            await self._register_commands(app.bot)
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                await app.start()
                try:
                    await self._replay(pending)
                    await _retrying("start", self._start_updates)
                    self._connected = True
                    log.info(
                        "telegram connected bot=@%s mode=%s",
                        self._bot_username,
                        "webhook" if self._webhook_url else "polling",
                    )
                    await asyncio.Event().wait()  # serve until cancelled
                finally:
                    self._connected = False
                    await self._stop_updates(app)
        finally:
            self._tasks = None
            if self._inbox is not None:
                self._inbox.close()
            with contextlib.suppress(Exception):
                await app.shutdown()
            for request in requests:
                with contextlib.suppress(Exception):
                    await request.shutdown()
            restore()
            log.info("telegram stopped")

    async def _start_updates(self) -> None:
        assert self._app is not None and self._app.updater is not None
        if self._webhook_url:
            host, port = self._listen
            await self._app.updater.start_webhook(
                listen=host,
                port=port,
                url_path=urlsplit(self._webhook_url).path.lstrip("/"),
                webhook_url=self._webhook_url,
                secret_token=self._webhook_secret,
                allowed_updates=ALLOWED_UPDATES,
                max_connections=1,  # in order, so update_ids only grow
            )
        else:
            await self._app.updater.start_polling(
                timeout=POLL_TIMEOUT,
                allowed_updates=ALLOWED_UPDATES,
                error_callback=_log_polling_error,
            )

    async def _stop_updates(self, app: Application[Any, Any, Any, Any, Any, Any]) -> None:
        """No new updates; hand over the ones fetched; let running turns finish within the grace."""
        if app.updater is not None and app.updater.running:
            with contextlib.suppress(Exception):
                await app.updater.stop()
        if app.running:
            with contextlib.suppress(Exception):
                await app.stop()
        if self._active:
            await asyncio.wait(set(self._active), timeout=self._grace)
        for task in self._active:
            task.cancel()

    def _spawn(self, coro: Awaitable[object]) -> None:
        assert self._tasks is not None
        task = self._tasks.create_task(_guarded(coro))
        self._active.add(task)
        task.add_done_callback(self._active.discard)

    # -- updates ----------------------------------------------------------------------------------
    def _receive(self, item: object) -> bool:
        """Journal an update as it enters PTB's queue, before polling confirms it to Telegram (on
        its next getUpdates) and before the state file records it; False drops a repeat."""
        inbox = self._inbox
        if not isinstance(item, Update) or inbox is None:
            return True  # PTB's stop signal
        if inbox.holds(item.update_id) or self._handled(item):
            log.debug("telegram skipping handled update update_id=%s", item.update_id)
            return False
        inbox.append(item.to_dict())
        return True

    async def _on_update(self, update: Update, _: ContextTypes.DEFAULT_TYPE) -> None:
        self._record(update)
        await self._save_state_logged()
        self._take(update)

    async def _replay(self, pending: list[Json]) -> None:
        """Take again, oldest first, the updates a previous run received but never finished. The
        agent skips a message it already stored, so one whose turn had begun is not doubled."""
        if not pending:
            return
        log.info("telegram replaying unfinished updates count=%d", len(pending))
        for data in pending:
            update_id = data.get("update_id")
            try:
                update = Update.de_json(data, self._bot())
            except Exception as exc:
                log.error("telegram cannot replay update update_id=%s error=%s", update_id, exc)
                self._finish(update_id)
                continue
            if not self._handled(update):
                self._record(update)  # so Telegram redelivering it is not taken a second time
            self._take(update)
        await self._save_state_logged()

    def _take(self, update: Update) -> None:
        """Start the work for a journaled update; one that needs none is finished at once."""
        if self._tasks is None:
            return  # stopping: it stays in the inbox for the next start
        working = False
        if update.message is not None:
            try:
                working = self._admit(update.message, update.update_id)
            except Exception:
                log.exception("telegram could not take update update_id=%s", update.update_id)
        if not working:
            self._finish(update.update_id)

    def _finish(self, update_id: Any) -> None:
        if self._inbox is not None and isinstance(update_id, int):
            self._inbox.finish(update_id)

    def _handled(self, update: Update) -> bool:
        # Telegram picks a random update_id after a week of silence, so a lower id is a repeat
        # only if its message is no newer than the newest one already handled.
        return update.update_id <= self._last_update_id and _date(update) <= self._last_date

    def _record(self, update: Update) -> None:
        self._last_update_id = update.update_id
        self._last_date = max(self._last_date, _date(update))

    def _admit(self, message: Message, update_id: int) -> bool:
        """Decide synchronously whether a message is for us; queue it in its chat's order.
        True when work was started that finishes the update in the inbox itself."""
        user = message.from_user
        if user is None or message.chat.type == ChatType.CHANNEL:
            return False
        sender_id = str(user.id)
        is_group = message.chat.type in _GROUPS
        addressed, foreign, text = self._addressing(message)
        decision = self._gate.judge(
            Request(
                sender_id,
                username=user.username,
                is_group=is_group,
                addressed=addressed,
                approved=not is_group
                and self._pairing is not None
                and self._pairing.is_approved(self.name, sender_id),
                for_another_bot=foreign,
            )
        )
        thread = message.message_thread_id if message.is_topic_message else None
        target = _Target(message.chat.id, thread)
        if decision.verdict is Verdict.PAIR:
            self._answer_stranger(target, sender_id, user.full_name)
        if decision.verdict is not Verdict.ADMIT:
            return False
        if not is_group and is_pair_command(text) and self._pairing is not None:
            self._spawn(self._answer_pair(target, sender_id, decision.owner, text))
            return False
        if not text and next(_attachments(message), None) is None:
            # A sticker, location, poll…: say so, rather than leave the sender wondering. Service
            # messages (a member joined, a pin) have no attachment and get nothing.
            if message.effective_attachment is not None and (addressed or not is_group):
                self._spawn(self.send(self._outbound(target, UNSUPPORTED)))
            return False
        if text.split(maxsplit=1)[:1] == ["/start"]:
            self._spawn(self.send(self._outbound(target, GREETING)))
            return False
        previous = self._tails.get(target)
        done = self._tails[target] = asyncio.Event()
        self._spawn(self._intake(message, text, addressed, target, previous, done, update_id))
        return True

    def _addressing(self, message: Message) -> tuple[bool, bool, str]:
        """(addressed to us, a command for another bot, text with our @mention removed)."""
        text = message.text or message.caption or ""
        entities = message.entities or message.caption_entities or ()
        me = self._bot_username.lower()
        addressed = foreign = False
        cuts: list[tuple[int, int]] = []
        for entity in entities:
            part = _utf16_slice(text, entity.offset, entity.length)
            if entity.type == MessageEntity.MENTION and me and part[1:].lower() == me:
                addressed = True
                cuts.append((entity.offset, entity.length))
            elif entity.type == MessageEntity.TEXT_MENTION and entity.user is not None:
                addressed = addressed or entity.user.id == self._bot_id
            elif entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
                command, _, bot = part.partition("@")
                if not bot or bot.lower() == me:
                    addressed = True
                    skip = _utf16_length(command)
                    cuts.append((entity.offset + skip, entity.length - skip))
                else:
                    foreign = True
        reply = message.reply_to_message
        if (
            reply is not None
            and reply.from_user is not None
            and reply.from_user.id == self._bot_id
            and reply.forum_topic_created is None  # a topic's root, not a reply to us
        ):
            addressed = True
        return addressed, foreign, _utf16_cut(text, cuts).strip()

    def _answer_stranger(self, target: _Target, sender_id: str, name: str) -> None:
        """Give a stranger their pairing code, at most once per REPLY_EVERY; nothing is kept.

        Decided here, in arrival order, so a burst of DMs gets one reply, not one per message;
        the file is written only when a reply is due (a few times an hour at most)."""
        assert self._pairing is not None
        try:
            answer = self._pairing.request(self.name, sender_id, name)
        except PairingError as exc:
            log.error("telegram pairing failed sender_id=%s: %s", sender_id, exc)
            return
        if answer.reply and answer.code:
            self._spawn(self.send(self._outbound(target, stranger_reply(answer.code))))

    async def _answer_pair(self, target: _Target, sender_id: str, owner: bool, text: str) -> None:
        assert self._pairing is not None
        store = self._pairing
        reply = await asyncio.to_thread(pair_command, store, self.name, sender_id, owner, text)
        await self.send(self._outbound(target, reply))

    async def _intake(
        self,
        message: Message,
        text: str,
        addressed: bool,
        target: _Target,
        previous: asyncio.Event | None,
        done: asyncio.Event,
        update_id: int,
    ) -> None:
        """Download media and build the inbound message, one at a time per chat, then start the
        turn; turns start in arrival order but run concurrently, so a /stop is never stuck.
        Cancelled (at shutdown), the update stays unfinished in the inbox and is replayed."""
        try:
            if previous is not None:
                await previous.wait()
            inbound = await self._inbound(message, text, addressed, target)
            if inbound is None:
                self._finish(update_id)
            else:
                # The agent logs the one INFO line per message; this detail is for debugging.
                log.debug(
                    "telegram message key=%s sender_id=%s media=%d",
                    inbound.key,
                    inbound.sender_id,
                    len(inbound.media),
                )
                self._spawn(self._turn(inbound, target, update_id))
        except Exception:
            log.exception("telegram could not read message chat_id=%s", target.chat_id)
            self._finish(update_id)
        finally:
            done.set()
            if self._tails.get(target) is done:
                del self._tails[target]

    async def _inbound(
        self, message: Message, text: str, addressed: bool, target: _Target
    ) -> InboundMessage | None:
        notes: list[str] = []
        media: list[str] = []
        for kind, attachment, name in _attachments(message):
            note, path = await self._download(kind, attachment, name, str(target.chat_id))
            notes.append(note)
            if path:
                media.append(path)
        body = "\n".join([*notes, text]).strip()
        if not body:
            return None
        user = message.from_user
        assert user is not None
        topic = f"telegram:{target.chat_id}:topic:{target.thread_id}" if target.thread_id else None
        return InboundMessage(
            channel=self.name,
            chat_id=str(target.chat_id),
            sender_id=str(user.id),
            text=body,
            sender_name=user.full_name,  # InboundMessage scrubs lone surrogates
            media=tuple(media),
            is_group=message.chat.type in _GROUPS,
            sender_is_owner=self._gate.is_owner(str(user.id), user.username),
            mentioned=addressed,
            message_id=str(message.message_id),
            session_key=topic,
        )

    async def _download(
        self, kind: str, attachment: Any, name: str | None, chat_id: str
    ) -> tuple[str, str]:
        """Save one attachment under media/telegram/<chat>/; (text note, workspace path or "")."""
        label = _safe_name(name) if name else kind
        size = attachment.file_size or 0
        if size > MAX_DOWNLOAD:
            return f"[{kind}: {label}, {size / 1e6:.1f} MB, too large to download]", ""
        try:
            file = await attachment.get_file()
            data = await file.download_as_bytearray(read_timeout=120)
        except TelegramError as exc:
            log.warning("telegram download failed kind=%s error=%s", kind, exc)
            return f"[{kind}: {label}, could not be downloaded]", ""
        if len(data) > MAX_DOWNLOAD:
            return f"[{kind}: {label}, too large to download]", ""
        unique = _safe_name(attachment.file_unique_id) or "file"
        if name:
            filename = f"{unique}-{_safe_name(name)}"
        else:
            filename = unique + _suffix(file.file_path or "")
        # One folder per chat: a chat's scope reaches its own attachments and no one else's.
        path = f"{media_folder(self.name, chat_id)}/{filename}"
        try:
            await asyncio.to_thread(atomic_write, self._workspace / path, bytes(data))
        except OSError as exc:
            # Disk full, permissions: the words of the message still count, so it goes on.
            log.warning("telegram could not save attachment kind=%s error=%s", kind, exc)
            return f"[{kind}: could not be saved]", ""
        return f"[{kind}: {path}]", path

    async def _turn(self, inbound: InboundMessage, target: _Target, update_id: int) -> None:
        with self._typing_while(target):
            try:
                reply = await self._handler(inbound)
            except Exception:
                log.exception("telegram handler failed key=%s", inbound.key)
                reply = None
        if reply is None or reply.on_sent is None:
            # Nothing stored to send again (a command's answer, an apology): finished before the
            # send, so a kill never makes a replay run a command such as /new twice.
            self._finish(update_id)
        if reply is not None:
            if target.thread_id and "thread_id" not in reply.metadata:
                meta = {**reply.metadata, "thread_id": str(target.thread_id)}
                reply = replace(reply, metadata=meta)
            if inbound.is_group and reply.reply_to is None:
                reply = replace(reply, reply_to=inbound.message_id)
            await self._send_pieces(reply)
        # Finished only once the reply is out, and at once (no thread, no fsync: a kill leaves
        # the written line in place): a kill before this replays the update, and the agent then
        # sends the stored answer again unless it was marked delivered.
        self._finish(update_id)
        if reply is not None:
            await reply.sent()

    @contextlib.contextmanager
    def _typing_while(self, target: _Target) -> Iterator[None]:
        """One typing loop per chat while any of its turns is running."""
        entry = self._typing.get(target)
        if entry is None:
            assert self._tasks is not None
            # The loop's coroutine is made inside the task: a task cancelled before it starts (an
            # instant reply) then leaves no coroutine that was never awaited.
            typing = self._tasks.create_task(self._typing_loop(target))
            entry = self._typing[target] = [0, typing]
        entry[0] += 1
        try:
            yield
        finally:
            entry[0] -= 1
            if entry[0] == 0:
                entry[1].cancel()
                del self._typing[target]

    async def _typing_loop(self, target: _Target) -> None:
        await _guarded(self._keep_typing(target))

    async def _keep_typing(self, target: _Target) -> None:
        bot = self._bot()
        while True:
            try:
                await bot.send_chat_action(
                    target.chat_id, ChatAction.TYPING, message_thread_id=target.thread_id
                )
            except RetryAfter as exc:
                await asyncio.sleep(min(_retry_seconds(exc), MAX_FLOOD_WAIT))
            except TelegramError as exc:
                log.debug("telegram typing failed chat_id=%s error=%s", target.chat_id, exc)
            await asyncio.sleep(TYPING_EVERY)

    # -- sending ----------------------------------------------------------------------------------
    async def send(self, message: OutboundMessage) -> bool:
        """Send a reply as HTML pieces within Telegram's limit; failures are logged, not raised.

        True when every piece reached Telegram (a scheduled job retries on False). Then the reply
        is no longer owed (taken by Telegram, or refused for good and logged).
        """
        sent = await self._send_pieces(message)
        await message.sent()
        return sent

    async def _send_pieces(self, message: OutboundMessage) -> bool:
        try:
            chat_id = int(message.chat_id)
            thread = message.metadata.get("thread_id")
            thread_id = int(thread) if thread else None
            reply_to = int(message.reply_to) if message.reply_to else None
        except ValueError:
            log.error("telegram cannot address reply chat_id=%s", message.chat_id)
            return False
        if self._app is None:
            log.warning("telegram send while not running chat_id=%s", chat_id)
            return False
        pieces = await asyncio.to_thread(render_pieces, message.text)  # scrubbed by OutboundMessage
        sent = True
        # One reply's pieces go out together, never interleaved with another reply to the chat.
        async with self._send_locks[chat_id]:
            for index, piece in enumerate(pieces):
                reply = reply_to if index == 0 else None
                sent = await self._send_piece(chat_id, piece, thread_id, reply) and sent
        return sent

    async def _send_piece(
        self, chat_id: int, piece: Piece, thread_id: int | None, reply_to: int | None
    ) -> bool:
        options: dict[str, Any] = {"chat_id": chat_id, "message_thread_id": thread_id}
        if reply_to is not None:
            options["reply_parameters"] = ReplyParameters(
                reply_to, allow_sending_without_reply=True
            )
        try:
            await self._deliver(text=piece.html, parse_mode=ParseMode.HTML, **options)
            return True
        except BadRequest as exc:
            if not _entities_refused(exc):
                log.warning("telegram send failed chat_id=%s error=%s", chat_id, exc)
                return False
            log.info("telegram refused the HTML, sending plain text chat_id=%s", chat_id)
        except TelegramError as exc:
            log.warning("telegram send failed chat_id=%s error=%s", chat_id, exc)
            return False
        try:
            await self._deliver(text=piece.markdown, **options)
            return True
        except TelegramError as exc:
            log.warning("telegram plain send failed chat_id=%s error=%s", chat_id, exc)
            return False

    async def _deliver(self, **options: Any) -> None:
        """sendMessage, honouring flood control (wait out a retry_after, then try once more) and
        trying again, with backoff, a send that failed before reaching Telegram or with a 5xx."""
        bot = self._bot()
        floods = failures = 0
        while True:
            wait = self._flood_until - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await bot.send_message(**options)
                return
            except RetryAfter as exc:
                seconds = _retry_seconds(exc)
                self._flood_until = asyncio.get_running_loop().time() + seconds
                log.warning(
                    "telegram flood control chat_id=%s retry_after=%s", options["chat_id"], seconds
                )
                floods += 1
                if floods == 2 or seconds > MAX_FLOOD_WAIT:
                    raise
            except NetworkError as exc:
                failures += 1
                if failures >= SEND_ATTEMPTS or not _resendable(exc):
                    raise
                delay = SEND_BACKOFF * 2 ** (failures - 1) * random.uniform(0.5, 1.0)
                # Not "send failed": that line means the piece is given up.
                log.warning(
                    "telegram send error, trying again chat_id=%s error=%s delay=%.1fs",
                    options["chat_id"],
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)

    def _bot(self) -> Bot:
        if self._app is None:
            raise RuntimeError("TelegramChannel is not running")
        return self._app.bot

    def _outbound(self, target: _Target, text: str) -> OutboundMessage:
        meta = {"thread_id": str(target.thread_id)} if target.thread_id else {}
        return OutboundMessage(self.name, str(target.chat_id), text, metadata=meta)

    async def _register_commands(self, bot: Bot) -> None:
        """setMyCommands only when Telegram's list differs, so restarts cost no extra calls."""
        wanted = [BotCommand(command, description) for command, description in COMMANDS]
        try:
            current = await bot.get_my_commands()
            if [(c.command, c.description) for c in current] != list(COMMANDS):
                await bot.set_my_commands(wanted)
        except TelegramError as exc:
            log.warning("telegram could not register commands error=%s", exc)

    # -- state ------------------------------------------------------------------------------------
    @property
    def _state_path(self) -> Path:
        # Keyed by the bot's id (public, unlike the token): another bot starts afresh.
        return self._state_dir / f"telegram-{self._bot_id}.json"

    def _load_state(self) -> None:
        try:
            state = json.loads(self._state_path.read_text(encoding="utf-8"))
            self._last_update_id = int(state["last_update_id"])
            self._last_date = int(state.get("last_date", 0))
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "telegram ignoring unreadable state path=%s error=%s", self._state_path, exc
            )

    def _save_state(self) -> None:
        state = {"last_update_id": self._last_update_id, "last_date": self._last_date}
        atomic_write(self._state_path, json.dumps(state).encode())

    async def _save_state_logged(self) -> None:
        try:
            await asyncio.to_thread(self._save_state)
        except OSError as exc:
            log.warning("telegram could not save state path=%s error=%s", self._state_path, exc)

    def _open_inbox(self) -> list[Json]:
        """Open the inbox journal (blocking); returns the updates left unfinished last time."""
        self._inbox = Inbox(self._state_dir / f"telegram-{self._bot_id}-inbox.jsonl")
        try:
            return self._inbox.open()
        except OSError as exc:
            # Serving without the journal is better than not serving: a kill may then lose the
            # messages in flight, as it would have without the inbox.
            log.error("telegram inbox unavailable path=%s error=%s", self._inbox.path, exc)
            return []


# -- helpers --------------------------------------------------------------------------------------
async def _retrying(what: str, action: Callable[[], Awaitable[Any]]) -> None:
    """Retry a start-up step while Telegram is unreachable; a refused token fails at once."""
    delay = 1.0
    while True:
        try:
            await action()
            return
        except InvalidToken:
            # Not chained: PTB's message quotes the token, and a traceback would print it.
            raise TelegramConfigError(
                "telegram refused the bot token (check channels.telegram.token)"
            ) from None
        except BadRequest:
            raise
        except NetworkError as exc:
            log.warning("telegram %s failed, retrying in %.0fs: %s", what, delay, exc)
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 60.0)


async def _guarded(coro: Awaitable[object]) -> None:
    """Run one message's work; a failure is logged and never takes the channel down."""
    try:
        await coro
    except Exception:
        log.exception("telegram task failed")


def _log_polling_error(exc: TelegramError) -> None:
    log.warning("telegram polling error: %s", exc)


class _UpdateQueue(asyncio.Queue[object]):
    """PTB's update queue: polling and the webhook put every update here before Telegram learns
    that it arrived, so `accept` can journal it first; an update it refuses is dropped."""

    def __init__(self, accept: Callable[[object], bool]) -> None:
        super().__init__()
        self._accept = accept

    async def put(self, item: object) -> None:
        self.put_nowait(item)  # unbounded: never waits

    def put_nowait(self, item: object) -> None:
        if self._accept(item):
            super().put_nowait(item)


class _UpdatesRequest(HTTPXRequest):
    """The getUpdates connection. PTB refetches forever a batch holding an update it cannot
    parse (logging the batch, message texts included, at CRITICAL each time), so such an update
    is handed on as its bare update_id: polling moves past it and the channel finishes it.
    `parse_json_payload` is PTB's documented hook for reading the Bot API's JSON."""

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        data = HTTPXRequest.parse_json_payload(payload)
        result = data.get("result")
        if isinstance(result, list):
            data["result"] = [update for raw in result if (update := _readable(raw)) is not None]
        return data


def _readable(raw: Any) -> Json | None:
    """`raw` if PTB can parse it; else its bare update_id, logged without any of its content."""
    try:
        Update.de_json(raw, None)
        return cast(Json, raw)
    except Exception as exc:
        update_id = raw.get("update_id") if isinstance(raw, dict) else None
        kinds = sorted(str(k) for k in raw if k != "update_id") if isinstance(raw, dict) else []
        log.error(
            "telegram skipping an update it cannot parse update_id=%s kinds=%s error=%s",
            update_id,
            ",".join(kinds),
            type(exc).__name__,
        )
        log.debug("telegram unparseable update update_id=%s", update_id, exc_info=True)
        return {"update_id": update_id} if isinstance(update_id, int) else None


def _resendable(exc: NetworkError) -> bool:
    """Whether a failed send may go again without risking a duplicate: yes when Telegram
    answered with an error status (5xx) or the request never left (no connection, no free pool
    slot); no for a refusal (400) or a lost or late answer (the message may have arrived)."""
    if isinstance(exc, BadRequest):
        return False
    cause = exc.__cause__
    return cause is None or isinstance(
        cause, TelegramError | httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout
    )


def _date(update: Update) -> int:
    message = update.message
    return int(message.date.timestamp()) if message is not None else 0


def _attachments(message: Message) -> Iterator[tuple[str, Any, str | None]]:
    if message.photo:
        yield "image", message.photo[-1], None  # sizes come smallest first
    if message.voice:
        yield "voice", message.voice, None
    if message.audio:
        yield "audio", message.audio, message.audio.file_name
    if message.video:
        yield "video", message.video, message.video.file_name
    if message.document:
        yield "file", message.document, message.document.file_name


def _retry_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # int → timedelta migration notice
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def _entities_refused(exc: BadRequest) -> bool:
    text = exc.message.lower()
    return "parse entities" in text or "text is empty" in text or "must be non-empty" in text


# Telegram counts UTF-16 units, a lone surrogate ("\ud800" in an update's JSON) as one of them:
# "surrogatepass" measures and slices it like Telegram, and decoding with "replace" turns it
# into U+FFFD, which every file and wire format can carry.
def _utf16(text: str) -> bytes:
    return text.encode("utf-16-le", errors="surrogatepass")


def _utf16_length(text: str) -> int:
    return len(_utf16(text)) // 2


def _utf16_slice(text: str, offset: int, length: int) -> str:
    return _utf16(text)[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


def _utf16_cut(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the (offset, length) UTF-16 spans Telegram's entities point at, and with
    any lone surrogate replaced."""
    data = _utf16(text)
    for offset, length in sorted(spans, reverse=True):
        data = data[: offset * 2] + data[(offset + length) * 2 :]
    return data.decode("utf-16-le", errors="replace")


def _safe_name(name: str) -> str:
    return _UNSAFE_NAME.sub("_", name).strip("._")[-80:]


def _suffix(file_path: str) -> str:
    suffix = Path(urlsplit(file_path).path).suffix
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix) else ""


def _file_url(base_url: str) -> str:
    """The file base URL for an API base URL: its last "/bot" made "/file/bot"."""
    head, sep, tail = base_url.rpartition("/bot")
    return f"{head}/file/bot{tail}" if sep else base_url.rstrip("/") + "/file"


def _parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise TelegramConfigError(f"channels.telegram.webhook_listen: {listen!r} is not host:port")
    return host.strip("[]") or "127.0.0.1", int(port)


class _TokenFilter(logging.Filter):
    """Replaces the bot token in log records: PTB and httpx put it in the URLs they log."""

    _NAMES = ("telegram", "httpx", "httpx2", "httpcore", "httpcore2", __name__)
    _QUIET = ("httpx", "httpx2")  # they log every request URL at INFO

    def __init__(self, token: str) -> None:
        super().__init__()
        # The part after the colon is the secret; file URLs carry the colon as %3A.
        self._secret = token.split(":", 1)[-1]

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:
            return True
        if self._secret in text:
            record.msg, record.args = text.replace(self._secret, "<redacted>"), None
        if record.exc_info and not record.exc_text:
            trace = logging.Formatter().formatException(record.exc_info)
            record.exc_text = trace.replace(self._secret, "<redacted>")
        return True

    def install(self) -> Callable[[], None]:
        """Attach to every SDK logger (filters don't inherit) and quiet request logs; undo."""
        names = {
            name
            for name in logging.root.manager.loggerDict
            if name.split(".")[0] in self._NAMES or name == __name__
        } | set(self._NAMES)
        loggers = [logging.getLogger(name) for name in names]
        for logger in loggers:
            logger.addFilter(self)
        quieted = [logging.getLogger(n) for n in self._QUIET]
        quieted = [logger for logger in quieted if logger.level == logging.NOTSET]
        for logger in quieted:
            logger.setLevel(logging.WARNING)

        def restore() -> None:
            for logger in loggers:
                logger.removeFilter(self)
            for logger in quieted:
                logger.setLevel(logging.NOTSET)

        return restore


_PROBE_TIMEOUT = 15.0  # seconds for `memgate doctor`'s whole check


async def probe_telegram(*, token: str, base_url: str) -> str:
    """`memgate doctor`: getMe and the webhook status, described in one line.

    Raises TelegramConfigError when the token is refused and ChannelConfigError when the API
    cannot be reached; never quotes the token.
    """
    bot = Bot(token, base_url=base_url, base_file_url=_file_url(base_url))
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT):
            await bot.initialize()  # getMe
            webhook = await bot.get_webhook_info()
    except InvalidToken:
        raise TelegramConfigError(
            "Telegram refused the bot token (channels.telegram.token)"
        ) from None
    except (TelegramError, TimeoutError) as exc:
        raise ChannelConfigError(f"Telegram API not reachable ({type(exc).__name__})") from None
    finally:
        with contextlib.suppress(TelegramError, RuntimeError):
            await bot.shutdown()
    mode = f"webhook {webhook.url}" if webhook.url else "no webhook (polling)"
    pending = f", {webhook.pending_update_count} pending updates"
    error = (
        f", last webhook error: {webhook.last_error_message}" if webhook.last_error_message else ""
    )
    return f"@{bot.username}, {mode}{pending}{error}"
