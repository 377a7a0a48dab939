"""Telegram attachments: which a message carries, and their download under media/telegram/<chat>/.

Part of the Telegram adapter, so it may import `telegram`; of ours `gateway.bus` (the media
folder) and `memory.fileio` (the one file writer).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from telegram import Message
from telegram.error import TelegramError

from channels.media_names import safe_name
from gateway.bus import media_folder
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

MAX_DOWNLOAD = 20 * 1024 * 1024  # the Bot API serves no larger file
_DOWNLOAD_TIMEOUT = 120  # seconds to read one file


def attachments(message: Message) -> Iterator[tuple[str, Any, str | None]]:
    """(kind, attachment, file name or None) for each file the message carries."""
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


async def download(
    workspace: Path, kind: str, attachment: Any, name: str | None, chat_id: str
) -> tuple[str, str]:
    """Save one attachment under media/telegram/<chat>/; (text note, workspace path or "")."""
    label = safe_name(name) if name else kind
    size = attachment.file_size or 0
    if size > MAX_DOWNLOAD:
        return f"[{kind}: {label}, {size / 1e6:.1f} MB, too large to download]", ""
    try:
        file = await attachment.get_file()
        data = await file.download_as_bytearray(read_timeout=_DOWNLOAD_TIMEOUT)
    except TelegramError as exc:
        log.warning("telegram download failed kind=%s error=%s", kind, exc)
        return f"[{kind}: {label}, could not be downloaded]", ""
    if len(data) > MAX_DOWNLOAD:
        return f"[{kind}: {label}, too large to download]", ""
    unique = safe_name(attachment.file_unique_id) or "file"
    suffix = "-" + safe_name(name) if name else _suffix(file.file_path or "")
    filename = unique + suffix
    # One folder per chat: a chat's scope reaches its own attachments and no one else's.
    path = f"{media_folder('telegram', chat_id)}/{filename}"
    try:
        await asyncio.to_thread(atomic_write, workspace / path, bytes(data))
    except OSError as exc:
        # Disk full, permissions: the words of the message still count, so it goes on.
        log.warning("telegram could not save attachment kind=%s error=%s", kind, exc)
        return f"[{kind}: could not be saved]", ""
    return f"[{kind}: {path}]", path


def _suffix(file_path: str) -> str:
    suffix = Path(urlsplit(file_path).path).suffix
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix) else ""
