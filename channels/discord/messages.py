"""Discord messages read and kept: whether one addresses the bot, its text with our mentions
removed, the inbox record that outlives a restart, and the typing indicator.

Part of the Discord adapter, so it uses `discord` (imported through channels.discord.connect);
of ours `gateway.bus` and the inbox's JSON type.
"""

from __future__ import annotations

import asyncio
import logging
import re

from channels.discord.connect import NETWORK_ERRORS, discord
from channels.inbox import Json
from gateway.bus import InboundMessage

log = logging.getLogger(__name__)

TYPING_EVERY = 8.0  # Discord shows "typing…" for about 10 s per request


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
