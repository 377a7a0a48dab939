"""Reaching the Bot API: its file URL, start-up steps retried while Telegram is unreachable (a
refused token or request raised as `TelegramConfigError`), polling or the webhook started and
stopped (stop steps must not fail the stop), the command menu, and the doctor's probe.

Part of the Telegram adapter, so it may import `telegram`; of ours `channels.errors` and the
channel's settings model.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from telegram import Bot, BotCommand, Update
from telegram.error import BadRequest, InvalidToken, NetworkError, TelegramError
from telegram.ext import Application

from channels.errors import ChannelConfigError
from channels.errors import TelegramConfigError as TelegramConfigError  # importable from here too
from gateway.config.models import TelegramConfig

log = logging.getLogger(__name__)

App = Application[Any, Any, Any, Any, Any, Any]
_PROBE_TIMEOUT = 15.0  # seconds for `memgate doctor`'s whole check
POLL_TIMEOUT = 30  # seconds a getUpdates long poll is held open
ALLOWED_UPDATES = (Update.MESSAGE,)


async def retrying(what: str, action: Callable[[], Awaitable[Any]]) -> None:
    """Retry a start-up step while Telegram is unreachable; a refused token or request (a webhook
    URL Telegram will not use) fails at once as a TelegramConfigError."""
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
        except BadRequest as exc:  # the API's own reason, which never quotes the token
            raise TelegramConfigError(f"telegram refused the {what} step: {exc.message}") from exc
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


async def start_updates(app: App, settings: TelegramConfig, secret: str) -> None:
    """Updates in: long polling, or the webhook (with `secret`) when webhook_url is set."""
    assert app.updater is not None
    if settings.webhook_url:
        host, port = settings.webhook_address
        await app.updater.start_webhook(
            listen=host,
            port=port,
            url_path=urlsplit(settings.webhook_url).path.lstrip("/"),
            webhook_url=settings.webhook_url,
            secret_token=secret,
            allowed_updates=ALLOWED_UPDATES,
            max_connections=1,  # in order, so update_ids only grow
        )
    else:
        await app.updater.start_polling(
            timeout=POLL_TIMEOUT, allowed_updates=ALLOWED_UPDATES, error_callback=_polling_error
        )


async def stop_updates(app: App) -> None:
    """No new updates; the ones fetched are handed over to the handlers."""
    if app.updater is not None and app.updater.running:
        await _close_logged("updater stop", app.updater.stop)
    if app.running:
        await _close_logged("stop", app.stop)


async def _close_logged(what: str, close: Callable[[], Awaitable[object]]) -> None:
    """A stop step (the updater's, the application's): what Telegram answers then must not hide
    why run() ends, nor skip the steps after it, so it is logged (at DEBUG: the channel is going
    away anyway) and passed over. The updater's stop re-raises what ended polling (a token
    revoked meanwhile) and confirms the last updates with one more getUpdates."""
    try:
        await close()
    except (TelegramError, OSError) as exc:
        log.debug("telegram %s failed error=%r", what, exc, exc_info=True)


def _polling_error(exc: TelegramError) -> None:
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
