"""Reaching Slack: the Web API client aimed at the configured URL, calls that honour
`Retry-After`, the Socket Mode client, and the doctor's probe (login, scopes, Socket Mode).

Part of the Slack adapter, so it may import `slack_sdk` (and aiohttp, its transport); of ours
only `channels.errors`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from channels.errors import SlackChannelError

log = logging.getLogger(__name__)

# What a failed call, download or send raises: the SDK's errors and its transport's.
NETWORK_ERRORS = (SlackClientError, aiohttp.ClientError, OSError, TimeoutError)
CALL_TIMEOUT = 30.0  # seconds for one Web API request
MAX_RATELIMIT_WAIT = 60.0  # a longer Retry-After fails the call instead of stalling a reply
# What memgate reads and writes: messages in DMs, channels (public and private) and group DMs,
# who sent them, and their files. A missing one is named by `memgate doctor`.
BOT_SCOPES = (
    "chat:write",
    "channels:history",
    "groups:history",
    "im:history",
    "mpim:history",
    "users:read",
    "files:read",
    "commands",  # /memgate new, /memgate pair CODE: Slack keeps every "/…" message to itself
)
# Errors that say a token can never work: fatal at start, named by the doctor.
_REFUSED = frozenset(
    {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "not_allowed_token_type"}
)


def web_client(token: str | None, api_base: str, session: aiohttp.ClientSession) -> AsyncWebClient:
    """The Web API client over `session`; without retry handlers of its own, as `call` waits
    out rate limits (with a bound) and the channel decides what else to retry."""
    return AsyncWebClient(
        token=token,
        base_url=api_base,
        session=session,
        timeout=int(CALL_TIMEOUT),
        retry_handlers=[],
    )


def socket_client(app_token: str, web: AsyncWebClient) -> SocketModeClient:
    """Socket Mode's client; made inside the running loop (the SDK starts its reader there)."""
    return SocketModeClient(app_token, web_client=web, auto_reconnect_enabled=True)


def error_code(exc: BaseException) -> str:
    """Slack's error string of a refused call (`invalid_auth`, `ratelimited`), else the type."""
    if isinstance(exc, SlackApiError):
        data = exc.response.data if exc.response is not None else None
        if isinstance(data, dict) and data.get("error"):
            return str(data["error"])
        return f"http_{exc.response.status_code}" if exc.response is not None else "refused"
    return type(exc).__name__


def retry_after(exc: SlackApiError) -> float | None:
    """Seconds Slack asks us to wait (a 429's `Retry-After`), else None: not a rate limit."""
    response = exc.response
    if response is None or response.status_code != 429:
        return None
    try:
        return max(0.0, float(response.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


async def call(
    method: Callable[..., Awaitable[AsyncSlackResponse]],
    /,
    *,
    max_wait: float = MAX_RATELIMIT_WAIT,
    **arguments: Any,
) -> AsyncSlackResponse:
    """`method(**arguments)` within CALL_TIMEOUT; a 429 is waited out for its `Retry-After`
    seconds and the call made again, until `max_wait` seconds were spent waiting. Raises one of
    NETWORK_ERRORS."""
    waited = 0.0
    while True:
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                return await method(**arguments)
        except SlackApiError as exc:
            delay = retry_after(exc)
            if delay is None or waited + delay > max_wait:
                raise
            log.info("slack rate limited method=%s retry_after=%.1fs", _name(method), delay)
            await asyncio.sleep(delay)
            waited += delay


def refused(exc: BaseException) -> bool:
    """The token can never work (revoked, wrong kind): retrying will not help."""
    return isinstance(exc, SlackApiError) and error_code(exc) in _REFUSED


async def open_socket_url(web: AsyncWebClient, app_token: str) -> str:
    """A Socket Mode websocket URL (apps.connections.open with the app-level token)."""
    try:
        response = await call(web.apps_connections_open, app_token=app_token)
    except SlackApiError as exc:
        code = error_code(exc)
        if code in _REFUSED:
            raise SlackChannelError(
                f"Slack refused the app-level token (channels.slack.app_token): {code}"
            ) from None
        if code in ("not_allowed", "socket_mode_not_enabled"):
            raise SlackChannelError(
                "Socket Mode is off for this app: turn it on (api.slack.com/apps → Socket Mode)"
            ) from None
        raise
    return str(response["url"])


def missing_scopes(response: AsyncSlackResponse) -> list[str]:
    """The bot scopes memgate needs that auth.test's `x-oauth-scopes` header does not list."""
    granted = {s.strip() for s in str(response.headers.get("x-oauth-scopes", "")).split(",")}
    return [scope for scope in BOT_SCOPES if scope not in granted]


_PROBE_TIMEOUT = 15.0  # seconds for `memgate doctor`'s whole check


async def probe_slack(*, token: str, app_token: str, api_base: str) -> str:
    """`memgate doctor`: log in with the bot token, read its scopes, and ask for a Socket Mode
    URL with the app-level token, in one line. Raises SlackChannelError naming what is wrong."""
    if not token.startswith("xoxb-"):
        raise SlackChannelError("channels.slack.token must be the bot token (xoxb-…)")
    if not app_token.startswith("xapp-"):
        raise SlackChannelError("channels.slack.app_token must be the app-level token (xapp-…)")
    async with aiohttp.ClientSession() as session:
        web = web_client(token, api_base, session)
        try:
            async with asyncio.timeout(_PROBE_TIMEOUT):
                auth = await call(web.auth_test, max_wait=5.0)
                missing = missing_scopes(auth)
                await open_socket_url(web, app_token)
        except SlackApiError as exc:
            code = error_code(exc)
            what = "the bot token (channels.slack.token)" if code in _REFUSED else "a call"
            raise SlackChannelError(f"Slack refused {what}: {code}") from None
        except (aiohttp.ClientError, OSError, TimeoutError, SlackClientError) as exc:
            raise SlackChannelError(f"Slack API not reachable ({type(exc).__name__})") from None
    if missing:
        raise SlackChannelError(
            f"the bot lacks the scopes {', '.join(missing)}: add them under OAuth & Permissions "
            "and reinstall the app"
        )
    return f"logged in as {auth.get('user')} in {auth.get('team')}, scopes ok, Socket Mode ok"


def _name(method: Callable[..., object]) -> str:
    return getattr(method, "__name__", type(method).__name__)
