"""Reaching the Bot API: its file URL, start-up steps retried while Telegram is unreachable, the
doctor's probe, and the error for a setting Telegram refuses.

Part of the Telegram adapter, so it may import `telegram`; of ours only `channels.base`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from telegram import Bot
from telegram.error import BadRequest, InvalidToken, NetworkError, TelegramError

from channels.base import ChannelConfigError

log = logging.getLogger(__name__)

_PROBE_TIMEOUT = 15.0  # seconds for `memgate doctor`'s whole check


class TelegramConfigError(ChannelConfigError, ValueError):
    """A setting Telegram or this install cannot serve: a refused token, a bad value, no webhooks."""


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
