"""Slack events read and kept: which message events are for us, whether one addresses the bot,
its text with our mention removed, our slash command read back as the command it carries
(how one is written here is `gateway.bus.typed_command`'s), the inbox record that outlives a restart, the message ids
(`ts`) as the integers the shared journal and live replies use, and the events already seen.

Pure: no SDK. Of ours `gateway.bus` and the inbox's JSON type.
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass
from typing import Any

from channels.inbox import Json
from gateway.bus import InboundMessage

# Message subtypes that are a person writing; the rest (edits, joins, bots' posts) are not.
_PERSON_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
_USER = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
_CHANNEL = re.compile(r"<#[A-Z0-9]+\|([^>]*)>")
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(here|channel|everyone)(?:\|[^>]*)?>")


@dataclass(frozen=True, slots=True)
class Incoming:
    """A person's message as memgate reads it from an event."""

    channel: str
    user: str
    text: str  # as Slack sent it (mrkdwn, mentions as <@U…>)
    ts: str
    thread_ts: str | None
    is_group: bool
    files: tuple[Json, ...]

    @property
    def session_key(self) -> str | None:
        """A thread is a conversation of its own; None: the channel's (or DM's) session."""
        return f"slack:{self.channel}:thread:{self.thread_ts}" if self.thread_ts else None


def incoming(event: Json, bot_user: str) -> Incoming | None:
    """The person's message in a `message` (or `app_mention`) event, else None: edits,
    deletions, joins, bots' posts and the bot's own."""
    if event.get("type") not in ("message", "app_mention"):
        return None
    if event.get("subtype") not in _PERSON_SUBTYPES or event.get("bot_id"):
        return None
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if not (isinstance(user, str) and isinstance(channel, str) and isinstance(ts, str)):
        return None
    if user == bot_user:
        return None
    thread = event.get("thread_ts")
    files = tuple(f for f in event.get("files") or () if isinstance(f, dict))
    return Incoming(
        channel=channel,
        user=user,
        text=str(event.get("text") or ""),
        ts=ts,
        # A thread's first message has thread_ts == ts only once replies exist; as ours it is
        # a thread either way.
        thread_ts=thread if isinstance(thread, str) else None,
        # im: a DM; mpim (a group DM), channel and group (a private channel): a group.
        is_group=event.get("channel_type") != "im" and not channel.startswith("D"),
        files=files,
    )


def slash_event(payload: Json, bot_user: str, ts: str) -> Json:
    """A `/memgate new` slash command as the message `@memgate /new` would be: Slack sends any
    message that starts with `/` to its own commands, so memgate's come through one of them,
    addressed to the bot wherever it is typed."""
    channel = str(payload.get("channel_id") or "")
    words = str(payload.get("text") or "").strip().lstrip("/").strip()  # `/memgate /new` too
    return {
        "type": "message",
        "channel": channel,
        "user": str(payload.get("user_id") or ""),
        "text": f"<@{bot_user}> /{words}" if words else f"<@{bot_user}> /help",
        "ts": ts,
        "channel_type": "im" if channel.startswith("D") else "channel",
    }


def mentions(text: str, bot_user: str) -> bool:
    return f"<@{bot_user}>" in text or f"<@{bot_user}|" in text


def clean_text(text: str, bot_user: str) -> str:
    """The text with our mention removed and Slack's markup made readable: `<@U1>` → `@U1`,
    `<#C1|general>` → `#general`, `<url|label>` → `label (url)`, entities unescaped."""
    text = re.sub(rf"<@{bot_user}(?:\|[^>]*)?>\s?", "", text)
    text = _USER.sub(r"@\1", text)
    text = _CHANNEL.sub(r"#\1", text)
    text = _SPECIAL.sub(r"@\1", text)
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
    return html.unescape(text).strip()


def ts_number(ts: str) -> int:
    """A message's `ts` ("1700000000.000100") as an integer (1700000000000100): Slack always
    writes six decimals, so the two convert both ways and keep their order."""
    seconds, _, micros = ts.partition(".")
    return int(seconds) * 1_000_000 + int(micros.ljust(6, "0")[:6])


def ts_text(number: int) -> str:
    return f"{number // 1_000_000}.{number % 1_000_000:06d}"


class Sequence:
    """The journal's ids: growing with arrival across every channel (a ts is unique only within
    its channel), from the clock so they keep growing across restarts."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        self._last = max(time.time_ns() // 1000, self._last + 1)
        return self._last


def message_key(channel: str, ts: str) -> str:
    return f"{channel}:{ts}"


def inbox_record(seq: int, event_id: str, message: Incoming, text: str, mentioned: bool) -> Json:
    """What the inbox keeps of a message: enough to answer it after a restart (its files
    are downloaded again then: their URLs stay valid)."""
    return {
        "seq": seq,
        "event_id": event_id,
        "channel": message.channel,
        "user": message.user,
        "text": text,
        "ts": message.ts,
        "thread_ts": message.thread_ts,
        "group": message.is_group,
        "mentioned": mentioned,
        "files": [_file_fields(f) for f in message.files],
    }


def incoming_from(record: Json) -> Incoming:
    """The message of a journaled record (its text already cleaned)."""
    thread = record.get("thread_ts")
    return Incoming(
        channel=str(record["channel"]),
        user=str(record["user"]),
        text=str(record["text"]),
        ts=str(record["ts"]),
        thread_ts=str(thread) if thread else None,
        is_group=bool(record.get("group")),
        files=tuple(f for f in record.get("files") or () if isinstance(f, dict)),
    )


def inbound(
    message: Incoming,
    text: str,
    *,
    name: str,
    media: tuple[str, ...],
    owner: bool,
    mentioned: bool,
) -> InboundMessage:
    return InboundMessage(
        channel="slack",
        chat_id=message.channel,
        sender_id=message.user,
        text=text,
        sender_name=name,
        media=media,
        is_group=message.is_group,
        sender_is_owner=owner,
        mentioned=mentioned,
        message_id=message.ts,
        session_key=message.session_key,
    )


def _file_fields(file: Json) -> dict[str, Any]:
    keep = ("id", "name", "mimetype", "size", "url_private_download", "url_private")
    return {key: file[key] for key in keep if key in file}
