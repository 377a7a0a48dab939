"""Discord messages read and kept: whether one addresses the bot, its text with our mentions
removed, its attachments saved, the inbox record that outlives a restart, and the typing
indicator.

Part of the Discord adapter, so it uses `discord` (imported through channels.discord.connect);
of ours `gateway.bus`, `memory.fileio`, the inbox's JSON type and safe file names.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

from channels.discord.connect import NETWORK_ERRORS, discord
from channels.inbox import Json
from channels.media_names import safe_name
from gateway.bus import InboundMessage, media_folder
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

TYPING_EVERY = 8.0  # Discord shows "typing…" for about 10 s per request
_DOWNLOAD_TIMEOUT = 60.0


def mentions(message: discord.Message, me_id: int) -> bool:
    """True if the message mentions the bot, its role, or replies to one of its messages."""
    if me_id in message.raw_mentions or any(user.id == me_id for user in message.mentions):
        return True
    role = message.guild.self_role if message.guild is not None else None
    if role is not None and role.id in message.raw_role_mentions:
        return True
    resolved = message.reference.resolved if message.reference is not None else None
    return isinstance(resolved, discord.Message) and resolved.author.id == me_id


def clean_content(message: discord.Message, me_id: int) -> str:
    """The content with the bot's own mentions removed and other users' shown by name."""
    text = re.sub(rf"<@!?{me_id}>\s?", "", message.content)
    role = message.guild.self_role if message.guild is not None else None
    if role is not None:
        text = re.sub(rf"<@&{role.id}>\s?", "", text)
    for user in message.mentions:
        if user.id != me_id:
            name = f"@{user.display_name}"
            text = text.replace(f"<@{user.id}>", name).replace(f"<@!{user.id}>", name)
    return text.strip()


async def read_attachments(
    message: discord.Message, text: str, workspace: Path, cap: int
) -> tuple[str, tuple[str, ...]]:
    """Download the attachments (each at most `cap` bytes); the text with one line per
    attachment, and the saved files' workspace paths."""
    lines = [text] if text else []
    media: list[str] = []
    for attachment in message.attachments:
        kind = attachment_kind(attachment.content_type)
        path = await _save(message, attachment, workspace, cap)
        if path is None:
            lines.append(f"[{kind}: {attachment.filename} (not downloaded)]")
        else:
            media.append(path)
            lines.append(f"[{kind}: {path}]")
    return "\n".join(lines), tuple(media)


async def _save(
    message: discord.Message, attachment: discord.Attachment, workspace: Path, cap: int
) -> str | None:
    """Download an attachment under media/discord/<chat>/; the workspace-relative path, or None."""
    if attachment.size > cap:
        log.warning(
            "discord attachment over the size cap message_id=%s size=%d cap=%d",
            message.id,
            attachment.size,
            cap,
        )
        return None
    try:
        async with asyncio.timeout(_DOWNLOAD_TIMEOUT):
            data = await attachment.read()
    except NETWORK_ERRORS as exc:
        log.warning("discord attachment download failed message_id=%s error=%r", message.id, exc)
        return None
    if len(data) > cap:
        return None
    # One folder per chat: a chat's scope reaches its own attachments and no one else's.
    folder = media_folder("discord", str(message.channel.id))
    name = safe_name(attachment.filename) or "file"
    relative = f"{folder}/{message.id}-{attachment.id}-{name}"
    try:
        await asyncio.to_thread(atomic_write, workspace / relative, data)
    except OSError as exc:
        log.error("discord attachment not saved path=%s error=%r", relative, exc)
        return None
    return relative


async def keep_typing(channel: discord.abc.Messageable) -> None:
    """Show the typing indicator until cancelled; a failure only costs the indicator."""
    while True:
        try:
            async with asyncio.timeout(TYPING_EVERY):
                await channel.typing()
        except NETWORK_ERRORS as exc:
            log.debug("discord typing failed error=%r", exc)
        await asyncio.sleep(TYPING_EVERY)


def inbox_record(message: discord.Message, text: str, mentioned: bool) -> Json:
    """What the inbox keeps of a message: enough to answer it after a restart."""
    return {
        "message_id": message.id,
        "chat_id": str(message.channel.id),
        "sender_id": str(message.author.id),
        "sender_name": message.author.display_name,
        "text": text,
        "group": message.guild is not None,
        "mentioned": mentioned,
        "attachments": [[a.filename, a.content_type] for a in message.attachments],
    }


def inbound_from(record: Json) -> InboundMessage:
    """The inbound message of a journaled record; attachments are named, not downloaded again."""
    lines = [str(record["text"])] if record["text"] else []
    for filename, content_type in record.get("attachments", []):
        kind = attachment_kind(content_type)
        lines.append(f"[{kind}: {filename} (not downloaded: received before a restart)]")
    return InboundMessage(
        channel="discord",
        chat_id=str(record["chat_id"]),
        sender_id=str(record["sender_id"]),
        text="\n".join(lines),
        sender_name=str(record.get("sender_name") or ""),
        is_group=bool(record.get("group")),
        mentioned=bool(record.get("mentioned")),
        message_id=str(record["message_id"]),
    )


def attachment_kind(content_type: str | None) -> str:
    major = (content_type or "").split("/", 1)[0]
    return major if major in ("image", "audio", "video") else "file"
