"""Reaching a Matrix homeserver: the nio client as memgate configures it, the login (an access
token, or a password login whose device is kept for the next start), and the doctor's probe.

Part of the Matrix adapter, so it may import `nio`; of ours `channels.errors`, the adapter's
state file and `gateway.config.models` for the settings.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp  # nio's own transport; imported for its exception types only
import nio

from channels.errors import MatrixChannelError as MatrixChannelError  # importable from here too
from channels.matrix.state import Login, file_stem, load_login, save_login
from gateway.config.models import MatrixConfig

log = logging.getLogger(__name__)

# What a failed request raises: the transport's errors, nio's own, and timeouts.
NETWORK_ERRORS = (OSError, aiohttp.ClientError, TimeoutError, nio.exceptions.ProtocolError)
REQUEST_TIMEOUT = 60.0  # seconds for one request other than /sync
# nio waits out M_LIMIT_EXCEEDED itself for `retry_after_ms`; past this many in a row the call
# fails instead of stalling the reply for good.
MAX_RATE_LIMITED = 8
_PROBE_TIMEOUT = 20.0


def new_client(settings: MatrixConfig, device_id: str = "") -> nio.AsyncClient:
    """A client without end-to-end encryption (see the README: encrypted rooms are not read)."""
    config = nio.AsyncClientConfig(
        encryption_enabled=False,
        store_sync_tokens=False,  # the adapter keeps its own, after the inbox has the events
        max_limit_exceeded=MAX_RATE_LIMITED,
        max_timeouts=2,
        request_timeout=REQUEST_TIMEOUT,
    )
    homeserver = settings.homeserver.rstrip("/")
    return nio.AsyncClient(homeserver, settings.user_id, device_id=device_id, config=config)


def login_path(state_dir: Path, user_id: str) -> Path:
    return state_dir / f"{file_stem(user_id)}-session.json"


async def log_in(client: nio.AsyncClient, settings: MatrixConfig, state_dir: Path | None) -> str:
    """Log `client` in; the device id. With `token`: as that token's device. Else the device
    kept in the state folder, or a password login that creates one (and keeps it).

    Raises MatrixChannelError when the homeserver refuses the token or the password, or the
    token belongs to another user."""
    token = settings.token.strip()
    if token:
        client.access_token = token
        return await _check_whoami(client, settings.user_id, "channels.matrix.token")
    path = login_path(state_dir, settings.user_id) if state_dir is not None else None
    kept = await asyncio.to_thread(load_login, path) if path is not None else None
    if kept is not None and kept.homeserver == client.homeserver:
        client.restore_login(kept.user_id, kept.device_id, kept.access_token)
        try:
            return await _check_whoami(client, settings.user_id, "the kept login")
        except MatrixChannelError as exc:
            log.warning("matrix kept login refused, logging in again error=%s", exc)
    if not settings.password:
        raise MatrixChannelError(
            "channels.matrix: set token (an access token) or password for the bot's account"
        )
    response = await client.login(
        password=settings.password,
        device_name=settings.device_name,
    )
    if isinstance(response, nio.LoginError):
        raise MatrixChannelError(
            f"the homeserver refused the password login for {settings.user_id} "
            f"({response.status_code}: {response.message})"
        )
    if path is not None:
        login = Login(client.homeserver, response.user_id, response.device_id, client.access_token)
        await asyncio.to_thread(save_login, path, login)
    log.info("matrix logged in with a password, new device device_id=%s", response.device_id)
    return str(response.device_id)


async def _check_whoami(client: nio.AsyncClient, user_id: str, what: str) -> str:
    response = await client.whoami()
    if isinstance(response, nio.WhoamiError):
        raise MatrixChannelError(
            f"the homeserver refused {what} ({response.status_code}: {response.message})"
        )
    if response.user_id != user_id:
        raise MatrixChannelError(
            f"{what} belongs to {response.user_id}, not channels.matrix.user_id {user_id}"
        )
    client.user_id = response.user_id
    client.device_id = response.device_id or client.device_id
    return str(client.device_id)


def can_post(room: nio.MatrixRoom, user_id: str) -> bool:
    """Whether the room's power levels let `user_id` send messages (and so edits) there."""
    return bool(room.power_levels.can_user_send_message(user_id, "m.room.message"))


async def probe_matrix(settings: MatrixConfig, state_dir: Path | None) -> str:
    """`memgate doctor`: log in, sync once, and check every joined room lets the bot post.

    Raises MatrixChannelError naming the refused login or the rooms where the bot lacks the
    power level to send messages."""
    client = new_client(settings)
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT):
            await log_in(client, settings, state_dir)
            sync_filter = {"room": {"timeline": {"limit": 0}}}
            response = await client.sync(timeout=0, sync_filter=sync_filter, full_state=True)
    except NETWORK_ERRORS as exc:
        raise MatrixChannelError(
            f"homeserver {settings.homeserver} not reachable ({type(exc).__name__})"
        ) from None
    finally:
        await client.close()
    if isinstance(response, nio.SyncError):
        raise MatrixChannelError(f"/sync refused ({response.status_code}: {response.message})")
    rooms = client.rooms.values()
    mute = [
        room.display_name or room.room_id for room in rooms if not can_post(room, client.user_id)
    ]
    if mute:
        raise MatrixChannelError(
            f"logged in as {client.user_id}, but its power level is too low to send messages "
            f"in: {', '.join(sorted(mute))} (raise it in the room's settings)"
        )
    encrypted = sum(room.encrypted for room in rooms)
    note = f", {encrypted} encrypted (not read)" if encrypted else ""
    return f"logged in as {client.user_id} (device {client.device_id}), in {len(rooms)} rooms{note}"
