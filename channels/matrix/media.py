"""A Matrix message's file saved for the agent (its media reader takes it from the workspace),
and the typing notification while a turn runs.

Part of the Matrix adapter, so it may import `nio`; of ours `gateway.bus`, `memory.fileio`, safe
file names and the adapter's own modules.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import nio

from channels.matrix.connect import NETWORK_ERRORS
from channels.matrix.events import Message
from channels.media_names import safe_name
from gateway.bus import media_folder
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

TYPING_FOR = 30_000  # milliseconds the homeserver shows "typing…" per request
TYPING_EVERY = 20.0  # seconds between two requests, within TYPING_FOR
_DOWNLOAD_TIMEOUT = 60.0


async def download(
    client: nio.AsyncClient, message: Message, workspace: Path, cap: int
) -> tuple[str, tuple[str, ...]]:
    """Save the message's file under media/matrix/<room>/ (at most `cap` bytes); the text with
    a line naming it, and its workspace path when saved."""
    assert message.attachment is not None
    url, name, kind = message.attachment
    lines = [message.text] if message.text else []
    path = await _save(client, message, url, name, workspace, cap) if url else None
    if path is None:
        lines.append(f"[{kind}: {name} (not downloaded)]")
        return "\n".join(lines), ()
    lines.append(f"[{kind}: {path}]")
    return "\n".join(lines), (path,)


async def _save(
    client: nio.AsyncClient, message: Message, url: str, name: str, workspace: Path, cap: int
) -> str | None:
    try:
        async with asyncio.timeout(_DOWNLOAD_TIMEOUT):
            response = await client.download(mxc=url)
    except NETWORK_ERRORS as exc:
        log.warning("matrix download failed event_id=%s error=%r", message.event_id, exc)
        return None
    if isinstance(response, nio.DownloadError):
        log.warning(
            "matrix download refused event_id=%s error=%s", message.event_id, response.message
        )
        return None
    data = response.body
    if not isinstance(data, bytes) or len(data) > cap:
        log.warning("matrix file over the size cap event_id=%s cap=%d", message.event_id, cap)
        return None
    # One folder per room: a chat's scope reaches its own files and no one else's.
    folder = media_folder("matrix", message.room_id)
    stem = safe_name(message.event_id.lstrip("$"))[:24] or "event"
    relative = f"{folder}/{stem}-{safe_name(name) or 'file'}"
    try:
        await asyncio.to_thread(atomic_write, workspace / relative, data)
    except OSError as exc:
        log.error("matrix file not saved path=%s error=%r", relative, exc)
        return None
    return relative


async def keep_typing(client: nio.AsyncClient, room_id: str) -> None:
    """Show the typing notification until cancelled; a failure only costs the notification (the
    bot's next message ends it)."""
    while True:
        try:
            async with asyncio.timeout(TYPING_EVERY):
                await client.room_typing(room_id, typing_state=True, timeout=TYPING_FOR)
        except NETWORK_ERRORS as exc:
            log.debug("matrix typing failed error=%r", exc)
        await asyncio.sleep(TYPING_EVERY)
