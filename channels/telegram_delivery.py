"""Telegram delivery: replies as HTML pieces, flood control, retries, and the typing indicator.

Part of the Telegram adapter, so it may import `telegram`; of ours `gateway.bus` and the
channels' own HTML renderer.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from telegram import Bot, ReplyParameters
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from channels.telegram_html import Piece, render_pieces
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

    async def send_pieces(self, message: OutboundMessage) -> bool:
        """Send a reply as HTML pieces within Telegram's limit; True when every piece went out.

        Failures are logged, not raised."""
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
        pieces = await asyncio.to_thread(render_pieces, message.text)  # scrubbed by OutboundMessage
        sent = True
        # One reply's pieces go out together, never interleaved with another reply to the chat.
        async with self._send_locks[chat_id]:
            for index, piece in enumerate(pieces):
                reply = reply_to if index == 0 else None
                sent = await self._send_piece(bot, chat_id, piece, thread_id, reply) and sent
        return sent

    async def _send_piece(
        self, bot: Bot, chat_id: int, piece: Piece, thread_id: int | None, reply_to: int | None
    ) -> bool:
        options: dict[str, Any] = {"chat_id": chat_id, "message_thread_id": thread_id}
        if reply_to is not None:
            options["reply_parameters"] = ReplyParameters(
                reply_to, allow_sending_without_reply=True
            )
        try:
            await self._deliver(bot, text=piece.html, parse_mode=ParseMode.HTML, **options)
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
            await self._deliver(bot, text=piece.markdown, **options)
            return True
        except TelegramError as exc:
            log.warning("telegram plain send failed chat_id=%s error=%s", chat_id, exc)
            return False

    async def _deliver(self, bot: Bot, **options: Any) -> None:
        """sendMessage, honouring flood control (wait out a retry_after, then try once more) and
        trying again, with backoff, a send that failed before reaching Telegram or with a 5xx."""
        floods = failures = 0
        while True:
            wait = self._flood_until - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await bot.send_message(**options)
                return
            except RetryAfter as exc:
                seconds = retry_seconds(exc)
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

    @contextlib.contextmanager
    def typing_while(self, target: Target, tasks: asyncio.TaskGroup) -> Iterator[None]:
        """One typing loop per chat while any of its turns is running."""
        count, typing = self._typing.get(target, (0, None))
        if typing is None:
            # The loop's coroutine is made inside the task: a task cancelled before it starts (an
            # instant reply) then leaves no coroutine that was never awaited.
            typing = tasks.create_task(self._typing_loop(target))
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
