"""Reaching the Bot API: its file URL, start-up steps retried while Telegram is unreachable (a
refused token raised as `TelegramConfigError`), the command menu, shutdown steps that
must not fail the stop, polling errors, and the doctor's probe.

Part of the Telegram adapter, so it may import `telegram`; of ours only `channels.errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from telegram import Bot, BotCommand
from telegram.error import BadRequest, InvalidToken, NetworkError, TelegramError

from channels.errors import ChannelConfigError
from channels.errors import TelegramConfigError as TelegramConfigError  # importable from here too

log = logging.getLogger(__name__)

_PROBE_TIMEOUT = 15.0  # seconds for `memgate doctor`'s whole check


async def retrying(what: str, action: Callable[[], Awaitable[Any]]) -> None:
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


async def register_commands(bot: Bot, menu: Iterable[tuple[str, str]]) -> None:
    """setMyCommands only when Telegram's list differs, so restarts cost no extra calls."""
    wanted = list(menu)
    if not wanted:
        return
    try:
        current = await bot.get_my_commands()
        if [(c.command, c.description) for c in current] != wanted:
            await bot.set_my_commands([BotCommand(name, text) for name, text in wanted])
    except TelegramError as exc:
        log.warning("telegram could not register commands error=%s", exc)


async def close_logged(what: str, close: Callable[[], Awaitable[object]]) -> None:
    """A shutdown step: whatever it raises must not hide why run() ends, nor skip the steps
    after it, so it is logged (at DEBUG: the channel is going away anyway) and passed over."""
    try:
        await close()
    except Exception as exc:
        log.debug("telegram %s failed error=%r", what, exc, exc_info=True)


def log_polling_error(exc: TelegramError) -> None:
    log.warning("telegram polling error: %s", exc)


def file_url(base_url: str) -> str:
    """The file base URL for an API base URL: its last "/bot" made "/file/bot"."""
    head, sep, tail = base_url.rpartition("/bot")
    return f"{head}/file/bot{tail}" if sep else base_url.rstrip("/") + "/file"


async def probe_telegram(*, token: str, base_url: str) -> str:
    """`memgate doctor`: getMe and the webhook status, described in one line.

    Raises TelegramConfigError when the token is refused and ChannelConfigError when the API
    cannot be reached; never quotes the token.
    """
    bot = Bot(token, base_url=base_url, base_file_url=file_url(base_url))
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
