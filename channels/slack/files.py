"""A Slack message's files saved into the workspace, for the media reader: downloaded with the
bot token from their private URL, each within the size cap, under media/slack/<channel>/.

Part of the Slack adapter; it uses aiohttp (the SDK's transport) and, of ours, `gateway.bus`,
`memory.fileio` and safe file names.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp

from channels.inbox import Json
from channels.media_names import safe_name
from gateway.bus import media_folder
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

_DOWNLOAD_TIMEOUT = 60.0


async def save_files(
    session: aiohttp.ClientSession,
    token: str,
    channel: str,
    ts: str,
    files: tuple[Json, ...],
    workspace: Path,
    cap: int,
) -> tuple[list[str], list[str]]:
    """Download each file; a line per file for the text, and the saved workspace paths."""
    lines: list[str] = []
    media: list[str] = []
    for file in files:
        name = str(file.get("name") or file.get("id") or "file")
        kind = file_kind(file.get("mimetype"))
        path = await _save(session, token, channel, ts, file, workspace, cap)
        if path is None:
            lines.append(f"[{kind}: {name} (not downloaded)]")
        else:
            media.append(path)
            lines.append(f"[{kind}: {path}]")
    return lines, media


async def _save(
    session: aiohttp.ClientSession,
    token: str,
    channel: str,
    ts: str,
    file: Json,
    workspace: Path,
    cap: int,
) -> str | None:
    url = file.get("url_private_download") or file.get("url_private")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        return None
    if int(file.get("size") or 0) > cap:
        log.warning(
            "slack file over the size cap chat_id=%s size=%s cap=%d", channel, file.get("size"), cap
        )
        return None
    try:
        async with asyncio.timeout(_DOWNLOAD_TIMEOUT):
            headers = {"Authorization": f"Bearer {token}"}
            async with session.get(url, headers=headers) as response:
                response.raise_for_status()
                data = await response.content.read(cap + 1)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning("slack file download failed chat_id=%s error=%s", channel, type(exc).__name__)
        return None
    if len(data) > cap:
        return None
    # One folder per chat: a chat's scope reaches its own files and no one else's.
    folder = media_folder("slack", channel)
    name = safe_name(str(file.get("name") or "")) or "file"
    relative = f"{folder}/{ts.replace('.', '')}-{safe_name(str(file.get('id') or 'f'))}-{name}"
    try:
        await asyncio.to_thread(atomic_write, workspace / relative, data)
    except OSError as exc:
        log.error("slack file not saved path=%s error=%r", relative, exc)
        return None
    return relative


def file_kind(mimetype: object) -> str:
    major = str(mimetype or "").split("/", 1)[0]
    return major if major in ("image", "audio", "video") else "file"
