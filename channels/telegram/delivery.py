"""Telegram delivery: replies as HTML pieces, flood control, retries, the typing indicator, and
replies shown while they are written (drafts in private chats, else a message edited).

Part of the Telegram adapter, so it may import `telegram`; of ours `gateway.bus` and the
channels' own HTML renderer, keyboards, live replies and message tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import warnings
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from telegram import Bot, InlineKeyboardMarkup, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from channels.live import LiveReply, Pacer
from channels.tasks import MessageTasks
from channels.telegram.html import Piece, markdown_parts, render_part
from channels.telegram.presses import keyboard
from gateway.bus import OutboundMessage

log = logging.getLogger(__name__)

TYPING_EVERY = 4.0  # Telegram shows "typing…" for about 5 s per sendChatAction
MAX_FLOOD_WAIT = 60.0  # a longer retry_after drops the piece rather than stall the chat
SEND_ATTEMPTS = 3  # tries of a send that failed without reaching Telegram, or with a 5xx
SEND_BACKOFF = 1.0  # seconds before the second try, doubled for each later one (with jitter)


@dataclass(frozen=True, slots=True)
class Target:
    """Where a conversation's replies go: a chat, and a forum topic in it."""

    chat_id: int
    thread_id: int | None = None


class TelegramDelivery:
    """Sends through the running bot (`bot()` returns None when the channel is not running)."""

    def __init__(self, bot: Callable[[], Bot | None]) -> None:
        self._bot = bot
        self._flood_until = 0.0
        self._send_locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)  # per chat
        self._typing: dict[Target, tuple[int, asyncio.Task[None]]] = {}
        self._pacer = Pacer()  # live replies: one call a second per chat
        self._no_drafts: set[int] = set()  # chats where Telegram refused a draft

    def live(
        self,
        target: Target,
        *,
        private: bool,
        reply_to: int | None,
        shown: list[int] | None = None,
        on_shown: Callable[[list[int]], None] | None = None,
    ) -> LiveReply | None:
        """A reply shown while it is written: drafts in a private chat that takes them, else a
        message sent and edited (`shown`, `on_shown`: see `LiveReply`). None while the channel
        is not running."""
        bot = self._bot()
        if bot is None:
            return None
        surface = _LiveSurface(self, bot, target, reply_to)
        drafts = private and target.chat_id not in self._no_drafts
        return LiveReply(surface, drafts=drafts, shown=shown or (), on_shown=on_shown)

    async def finish_live(
        self,
        live: LiveReply,
        chat_id: int,
        message: OutboundMessage | None,
        *,
        skip: int = 0,
        progress: Callable[[int], None] | None = None,
    ) -> bool:
        """Put the whole reply where it was shown (a reply nothing was shown of goes out as any
        reply, see `send_pieces` for `skip` and `progress`); True when all of it went out."""
        if live.untouched:
            if message is None:
                return True
            return await self.send_pieces(message, skip=skip, progress=progress)
        # Like a reply's pieces, never interleaved with another reply to the chat.
        async with self._send_locks[chat_id]:
            # A shown reply's messages take no keyboard: its buttons become commands to type.
            text = message.text_with_commands() if message is not None else None
            return await live.finish(text, progress=progress)

    async def live_turn(self, chat_id: int, *, wait: bool) -> bool:
        """Whether a live reply may call Telegram for `chat_id` now: at most one call a second
        per chat, none under flood control. `wait`: wait for the turn rather than skip it."""
        return await self._pacer.turn(chat_id, wait=wait, not_before=self._flood_until)

    def flooded(self, exc: RetryAfter, chat_id: int) -> None:
        """Telegram asked us to wait: every send and live update of the channel waits."""
        seconds = retry_seconds(exc)
        self._flood_until = asyncio.get_running_loop().time() + seconds
        log.warning("telegram flood control chat_id=%s retry_after=%s", chat_id, seconds)

    async def send_pieces(
        self,
        message: OutboundMessage,
        *,
        skip: int = 0,
        progress: Callable[[int], None] | None = None,
    ) -> bool:
        """Send a reply as HTML pieces within Telegram's limit; True when every piece went out.

        The reply's Markdown parts (`markdown_parts`, as a live reply finishes them) go out in
        order, each as one piece or more. The first `skip` parts are left out (they went out
        before a restart); of a reply in several parts, `progress(n)` hears when the first n are
        done with (taken, or refused for good), but the last. Failures are logged, not raised."""
        try:
            chat_id = int(message.chat_id)
            thread = message.metadata.get("thread_id")
            thread_id = int(thread) if thread else None
            reply_to = int(message.reply_to) if message.reply_to else None
        except ValueError:
            log.error("telegram cannot address reply chat_id=%s", message.chat_id)
            return False
        bot = self._bot()
        if bot is None:
            log.warning("telegram send while not running chat_id=%s", chat_id)
            return False
        parts = await asyncio.to_thread(rendered_parts, message.text)  # scrubbed by OutboundMessage
        last = (len(parts) - 1, len(parts[-1]) - 1) if parts else None
        markup = keyboard(message.buttons)  # under the reply's last piece
        sent = True
        # One reply's pieces go out together, never interleaved with another reply to the chat.
        async with self._send_locks[chat_id]:
            for index, pieces in enumerate(parts):
                if index < skip:
                    continue
                for number, piece in enumerate(pieces):
                    reply = reply_to if index == number == 0 else None
                    buttons = markup if (index, number) == last else None
                    made = await self._send_piece(bot, chat_id, piece, thread_id, reply, buttons)
                    sent = made is not None and sent
                if progress is not None and index + 1 < len(parts):
                    progress(index + 1)
        return sent

    async def _send_piece(
        self,
        bot: Bot,
        chat_id: int,
        piece: Piece,
        thread_id: int | None,
        reply_to: int | None,
        markup: InlineKeyboardMarkup | None = None,
    ) -> int | None:
        """Send one piece (with `markup` under it); the id of the message it made, or None when
        it did not go out."""
        options: dict[str, Any] = {"chat_id": chat_id, "message_thread_id": thread_id}
        if markup is not None:
            options["reply_markup"] = markup
        if reply_to is not None:
            options["reply_parameters"] = ReplyParameters(
                reply_to, allow_sending_without_reply=True
            )
        try:
            made = await self._deliver(
                bot.send_message, text=piece.html, parse_mode=ParseMode.HTML, **options
            )
            return _message_id(made)
        except BadRequest as exc:
            if not _entities_refused(exc):
                log.warning("telegram send failed chat_id=%s error=%s", chat_id, exc)
                return None
            log.info("telegram refused the HTML, sending plain text chat_id=%s", chat_id)
        except TelegramError as exc:
            log.warning("telegram send failed chat_id=%s error=%s", chat_id, exc)
            return None
        try:
            return _message_id(
                await self._deliver(bot.send_message, text=piece.markdown, **options)
            )
        except TelegramError as exc:
            log.warning("telegram plain send failed chat_id=%s error=%s", chat_id, exc)
            return None

    async def _deliver(self, call: Callable[..., Awaitable[object]], **options: Any) -> object:
        """sendMessage (or editMessageText), honouring flood control (wait out a retry_after,
        then try once more) and trying again, with backoff, a call that failed before reaching
        Telegram or with a 5xx."""
        floods = failures = 0
        while True:
            wait = self._flood_until - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                return await call(**options)
            except RetryAfter as exc:
                self.flooded(exc, options["chat_id"])
                seconds = retry_seconds(exc)
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

    @contextlib.contextmanager
    def typing_while(self, target: Target, tasks: MessageTasks) -> Iterator[None]:
        """One typing loop per chat while any of its turns is running."""
        count, typing = self._typing.get(target, (0, None))
        if typing is None:
            # The loop's coroutine is made inside the task: a task cancelled before it starts (an
            # instant reply) then leaves no coroutine that was never awaited.
            typing = tasks.spawn(self._typing_loop, target)
        self._typing[target] = (count + 1, typing)
        try:
            yield
        finally:
            count, typing = self._typing[target]
            if count == 1:
                typing.cancel()
                del self._typing[target]
            else:
                self._typing[target] = (count - 1, typing)

    async def _typing_loop(self, target: Target) -> None:
        bot = self._bot()
        while bot is not None:
            try:
                await bot.send_chat_action(
                    target.chat_id, ChatAction.TYPING, message_thread_id=target.thread_id
                )
            except RetryAfter as exc:
                await asyncio.sleep(min(retry_seconds(exc), MAX_FLOOD_WAIT))
            except TelegramError as exc:
                log.debug("telegram typing failed chat_id=%s error=%s", target.chat_id, exc)
            await asyncio.sleep(TYPING_EVERY)


def rendered_parts(text: str) -> list[list[Piece]]:
    """`text`'s Markdown parts, each rendered as the pieces it is sent as (`render_pieces`)."""
    return [render_part(part) for part in markdown_parts(text)]


class _LiveSurface:
    """A live reply's `Surface` on Telegram: drafts, then messages in HTML (plain as fallback).

    What is shown while the text comes is plain text: half-written Markdown is no HTML yet.
    """

    def __init__(
        self, delivery: TelegramDelivery, bot: Bot, target: Target, reply_to: int | None
    ) -> None:
        self._delivery = delivery
        self._bot = bot
        self._chat = target.chat_id
        self._thread = target.thread_id
        self._reply_to = reply_to
        self._draft_id = random.randint(1, 2**31 - 1)  # any non-zero id; the same one animates

    def split(self, text: str) -> list[str]:
        return markdown_parts(text)

    async def preview(self, text: str) -> bool:
        if not await self._delivery.live_turn(self._chat, wait=False):
            return True  # the next update shows the text as it then stands
        try:
            await self._bot.send_message_draft(
                self._chat, self._draft_id, text=text, message_thread_id=self._thread
            )
        except RetryAfter as exc:
            self._delivery.flooded(exc, self._chat)
        except BadRequest as exc:
            # Not offered here (an older Bot API server, a chat that takes none): edit messages.
            self._delivery._no_drafts.add(self._chat)
            log.info("telegram draft refused, editing a message instead chat_id=%s error=%s",
                     self._chat, exc)  # fmt: skip
            return False
        except TelegramError as exc:
            log.debug("telegram draft failed chat_id=%s error=%s", self._chat, exc)
        return True

    async def post(self, text: str, *, final: bool, first: bool) -> int | None:
        reply_to = self._reply_to if first else None
        if final:  # sent as a whole reply's pieces are, flood control honoured
            made: list[int | None] = []
            for index, piece in enumerate(await asyncio.to_thread(render_part, text)):
                made.append(
                    await self._delivery._send_piece(
                        self._bot, self._chat, piece, self._thread, reply_to if index == 0 else None
                    )
                )
            # A part longer than one message once rendered (rare) is known by its first.
            return made[0] if made and None not in made else None
        if not await self._delivery.live_turn(self._chat, wait=False):
            return None  # sent at the next update
        options: dict[str, Any] = {"message_thread_id": self._thread}
        if reply_to is not None:
            options["reply_parameters"] = ReplyParameters(
                reply_to, allow_sending_without_reply=True
            )
        try:
            message = await self._bot.send_message(self._chat, text, **options)
        except RetryAfter as exc:
            self._delivery.flooded(exc, self._chat)
            return None
        except TelegramError as exc:
            log.warning("telegram send failed chat_id=%s error=%s", self._chat, exc)
            return None
        return message.message_id

    async def edit(self, message: int, text: str, *, final: bool) -> bool:
        if not await self._delivery.live_turn(self._chat, wait=final):
            return True  # skipped; the next update shows the text as it then stands
        if not final:
            try:
                await self._bot.edit_message_text(text, self._chat, message)
            except RetryAfter as exc:
                self._delivery.flooded(exc, self._chat)
            except TelegramError as exc:
                if _uneditable(exc):
                    log.info("telegram message cannot be edited chat_id=%s error=%s",
                             self._chat, exc)  # fmt: skip
                    return False
                if not _unchanged(exc):
                    log.debug("telegram edit failed chat_id=%s error=%s", self._chat, exc)
            return True
        pieces = await asyncio.to_thread(render_part, text)
        if not await self._edit_final(message, pieces[0]):
            return False
        sent = True
        for piece in pieces[1:]:
            made = await self._delivery._send_piece(
                self._bot, self._chat, piece, self._thread, None
            )
            sent = made is not None and sent
        return sent

    async def delete(self, message: int) -> None:
        try:
            await self._bot.delete_message(self._chat, message)
        except TelegramError as exc:  # gone already, too old (48 h), or no right to: it stays
            log.info("telegram could not delete a message chat_id=%s error=%s", self._chat, exc)

    async def _edit_final(self, message: int, piece: Piece) -> bool:
        """The finished text in the message: HTML, or plain if Telegram refuses the entities."""
        edit = self._bot.edit_message_text
        options: dict[str, Any] = {"chat_id": self._chat, "message_id": message}
        try:
            await self._delivery._deliver(
                edit, text=piece.html, parse_mode=ParseMode.HTML, **options
            )
            return True
        except BadRequest as exc:
            if _unchanged(exc):
                return True
            if not _entities_refused(exc):
                log.warning("telegram edit failed chat_id=%s error=%s", self._chat, exc)
                return False
            log.info("telegram refused the HTML, editing in plain text chat_id=%s", self._chat)
        except TelegramError as exc:
            log.warning("telegram edit failed chat_id=%s error=%s", self._chat, exc)
            return False
        try:
            await self._delivery._deliver(edit, text=piece.markdown, **options)
            return True
        except TelegramError as exc:
            if _unchanged(exc):
                return True
            log.warning("telegram plain edit failed chat_id=%s error=%s", self._chat, exc)
            return False


def retry_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # int → timedelta migration notice
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


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


def _entities_refused(exc: BadRequest) -> bool:
    text = exc.message.lower()
    return "parse entities" in text or "text is empty" in text or "must be non-empty" in text


def _uneditable(exc: TelegramError) -> bool:
    """Telegram will never take an edit of this message: deleted, too old, or no rights."""
    text = exc.message.lower()
    gone = ("not found", "can't be edited", "message_id_invalid", "not enough rights")
    return isinstance(exc, BadRequest) and any(words in text for words in gone)


def _message_id(made: object) -> int | None:
    message_id = getattr(made, "message_id", None)
    return message_id if isinstance(message_id, int) else None


def _unchanged(exc: TelegramError) -> bool:
    """Telegram refuses an edit that changes nothing; the message already shows that text."""
    return isinstance(exc, BadRequest) and "message is not modified" in exc.message.lower()
