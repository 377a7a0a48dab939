"""Matrix messages read and kept: whether one addresses the bot, its text without our mention or
a reply's quoted fallback, its thread, and the inbox record that outlives a restart.

Works on the events' JSON (`event.source`), as the homeserver sent them; no SDK. Of ours it
imports `gateway.bus` and the inbox's JSON type.
"""

from __future__ import annotations

import re
import time
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from channels.inbox import Json
from gateway.bus import InboundMessage

# Message types the agent reads; m.notice is what bots send, so a bot never answers another.
TEXT_TYPES = frozenset({"m.text", "m.emote"})
FILE_TYPES = {"m.image": "image", "m.file": "file", "m.audio": "audio", "m.video": "video"}
ID_FIELD = "seq"  # the inbox's growing id: Matrix event ids are not numbers


@dataclass(frozen=True, slots=True)
class Message:
    """One `m.room.message` as the adapter reads it."""

    room_id: str
    event_id: str
    sender: str
    text: str  # the body, our mention and a reply's quoted fallback removed
    addressed: bool  # mentions the bot, or replies to one of its messages
    thread: str | None  # the thread's root event, for a message in an `m.thread`
    attachment: tuple[str, str, str] | None  # (mxc url, file name, kind) of a file message

    @property
    def session_key(self) -> str | None:
        return f"matrix:{self.room_id}:thread:{self.thread}" if self.thread else None


def read_message(
    room_id: str, source: dict[str, Any], me: str, my_name: str, mine: Container[str]
) -> Message | None:
    """The message in an event's JSON, or None for anything the agent does not read (an edit,
    a notice, a state event, a redaction). `mine`: ids of events the bot sent (replies to them
    address it)."""
    if source.get("type") != "m.room.message":
        return None
    content = source.get("content")
    if not isinstance(content, dict):
        return None
    relation = content.get("m.relates_to")
    relation = relation if isinstance(relation, dict) else {}
    if relation.get("rel_type") == "m.replace":
        return None  # an edit of an earlier message: that one was answered as it stood
    msgtype = content.get("msgtype")
    body = content.get("body")
    if not isinstance(body, str) or (msgtype not in TEXT_TYPES and msgtype not in FILE_TYPES):
        return None
    attachment = None
    if msgtype in FILE_TYPES:
        url = content.get("url")  # an encrypted file has `file` instead: not readable here
        name = str(content.get("filename") or body or "file")
        attachment = (str(url) if isinstance(url, str) else "", name, FILE_TYPES[msgtype])
        body = "" if name == body else body  # the body of a file is its name unless captioned
    thread = relation.get("event_id") if relation.get("rel_type") == "m.thread" else None
    reply_to = (relation.get("m.in_reply_to") or {}).get("event_id")
    # In a thread, clients set m.in_reply_to to the thread's latest event as a fallback
    # (`is_falling_back`): that is not a reply to the bot.
    replied = reply_to in mine and not relation.get("is_falling_back")
    text = strip_reply_fallback(body) if reply_to else body
    addressed = replied or mentions(content, text, me, my_name)
    return Message(
        room_id,
        str(source.get("event_id", "")),
        str(source.get("sender", "")),
        strip_mention(text, me, my_name),
        addressed,
        str(thread) if isinstance(thread, str) else None,
        attachment,
    )


def mentions(content: dict[str, Any], text: str, me: str, my_name: str) -> bool:
    """True if the message mentions the bot: intentional mentions (`m.mentions`), a pill to its
    user id, or its user id or display name written out."""
    declared = content.get("m.mentions")
    if isinstance(declared, dict) and me in (declared.get("user_ids") or []):
        return True
    formatted = content.get("formatted_body")
    if isinstance(formatted, str) and f"matrix.to/#/{me}" in formatted:
        return True
    return me in text or bool(my_name and _name_pattern(my_name).search(text))


def strip_mention(text: str, me: str, my_name: str) -> str:
    """The text without the bot's id or display name (and the `: ` clients add after a pill)."""
    text = re.sub(rf"{re.escape(me)}:?\s?", "", text)
    if my_name:
        text = _name_pattern(my_name).sub("", text, count=1)
    return text.strip()


def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w)@?{re.escape(name)}(?!\w):?\s?", re.IGNORECASE)


def strip_reply_fallback(body: str) -> str:
    """A reply's body without the quoted lines of the message it answers (`> <@x> …`)."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    return "\n".join(lines[index:]).strip()


class Sequence:
    """Inbox ids for arriving events: nanoseconds since the epoch, each above the last, so they
    grow across restarts too."""

    def __init__(self, floor: int = 0) -> None:
        self._last = floor

    def next(self) -> int:
        self._last = max(self._last + 1, time.time_ns())
        return self._last


def inbox_record(seq: int, message: Message, is_group: bool, sender_name: str) -> Json:
    """What the inbox keeps of a message: enough to answer it after a restart."""
    return {
        ID_FIELD: seq,
        "event_id": message.event_id,
        "room_id": message.room_id,
        "sender_id": message.sender,
        "sender_name": sender_name,
        "text": message.text,
        "group": is_group,
        "mentioned": message.addressed,
        "thread": message.thread,
        "attachment": list(message.attachment[1:]) if message.attachment else None,
    }


def inbound_from(record: Json, owner: bool) -> InboundMessage:
    """The inbound message of a journaled record; an attachment is named, not downloaded again."""
    lines = [str(record["text"])] if record["text"] else []
    if record.get("attachment"):
        name, kind = record["attachment"]
        lines.append(f"[{kind}: {name} (not downloaded: received before a restart)]")
    thread = record.get("thread")
    room = str(record["room_id"])
    return InboundMessage(
        channel="matrix",
        chat_id=room,
        sender_id=str(record["sender_id"]),
        text="\n".join(lines),
        sender_name=str(record.get("sender_name") or ""),
        is_group=bool(record.get("group")),
        sender_is_owner=owner,
        mentioned=bool(record.get("mentioned")),
        message_id=str(record["event_id"]),
        session_key=f"matrix:{room}:thread:{thread}" if thread else None,
    )
