"""A session's JSONL file: its name, its record format, reading it and appending to it.

One line per record: a metadata line first, then messages in chat-API shape (plus a timestamp)
and markers (`consolidated`, `delivered`). Reading keeps only lines that end in a newline, and
skips a corrupt, too deeply nested or wrong-shaped line with a warning instead of giving up on the
file. Appending writes whole lines with one fsync, and takes back a write cut short.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.fileio import FILE_MODE, ensure_private_dir, fsync_dir

log = logging.getLogger(__name__)

Message = dict[str, Any]

_UNSAFE = re.compile(r"[%/\x00-\x1f\x7f]")
_ESCAPE = re.compile(r"%([0-9A-F]{2})")
SUFFIX = ".jsonl"
_ROLES = ("system", "user", "assistant", "tool")


def file_name(key: str) -> str:
    """`telegram:42` → `telegram:42.jsonl`; `%`, `/`, NUL and control characters are escaped."""
    if not key:
        raise ValueError("session key must not be empty")
    return _UNSAFE.sub(lambda m: f"%{ord(m.group()):02X}", key) + SUFFIX


def key_from_file_name(name: str) -> str:
    """The inverse of file_name()."""
    if not name.endswith(SUFFIX):
        raise ValueError(f"not a session file name: {name!r}")
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), name[: -len(SUFFIX)])


@dataclass
class Loaded:
    """What a session file holds, as parsed (all of it, or from message `base` on)."""

    messages: list[Message]
    last_consolidated: int
    created_at: str | None
    group: bool
    good_size: int  # bytes up to the end of the last complete line
    torn: bool  # bytes after good_size belong to a line cut short
    key: str | None = None  # from the metadata line
    delivered: set[str] = field(default_factory=set)  # reply ids marked delivered
    base: int = 0  # position in the file of messages[0]
    offsets: list[int] = field(default_factory=list)  # byte offset of each message's line
    marker: int | None = None  # the last consolidation pointer among the parsed lines
    earlier_owed: list[Message] = field(default_factory=list)  # owed answers before `base`


def parse_session_bytes(
    data: bytes, origin: str = "<bytes>", *, offset: int = 0, base: int = 0
) -> Loaded:
    """Parse a session file's bytes; only lines ending in a newline count.

    `data` may start inside the file, at byte `offset` where message `base` begins (a line start).
    """
    end = data.rfind(b"\n") + 1
    torn = end < len(data)
    if torn:
        log.warning("ignoring torn last line file=%s bytes=%d", origin, len(data) - end)
    messages: list[Message] = []
    offsets: list[int] = []
    marker: int | None = None
    created_at = None
    group = False
    key = None
    delivered: set[str] = set()
    position = offset
    for number, raw in enumerate(data[:end].split(b"\n")[:-1], start=1):
        at, position = position, position + len(raw) + 1
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            # RecursionError: nested deeper than the decoder recurses (about a thousand levels).
            log.warning("skipping corrupt line file=%s %s", origin, _where(number, at, offset))
            continue
        if not isinstance(record, dict):
            log.warning("skipping non-object line file=%s %s", origin, _where(number, at, offset))
            continue
        kind = record.get("_type")
        if kind == "metadata":
            created_at = created_at or record.get("created_at")
            group = group or bool(record.get("group"))
            key = key or record.get("key")
        elif kind == "consolidated":
            pointer = record.get("last_consolidated")
            if isinstance(pointer, int) and pointer >= 0:
                marker = pointer
        elif kind == "delivered":
            if isinstance(record.get("reply_id"), str):
                delivered.add(record["reply_id"])
        elif "role" in record:
            if well_formed(record):
                messages.append(record)
                offsets.append(at)
            else:
                # Valid JSON of the wrong shape costs only itself, like an unparseable line.
                log.warning(
                    "skipping malformed message file=%s %s", origin, _where(number, at, offset)
                )
        else:
            log.warning("skipping unknown record file=%s %s", origin, _where(number, at, offset))
    return Loaded(
        messages,
        min(marker or 0, base + len(messages)),
        created_at,
        group,
        offset + end,
        torn,
        key,
        delivered,
        base,
        offsets,
        marker,
    )


def _where(number: int, at: int, offset: int) -> str:
    """A bad line's place: its line number in a whole read, its byte offset in a partial one."""
    return f"line={number}" if offset == 0 else f"offset={at}"


def well_formed(record: dict[str, Any]) -> bool:
    """True if a stored message has the shape the model's API takes (role, content, tool calls)."""
    role = record.get("role")
    if role not in _ROLES:
        return False
    content = record.get("content")
    if not _content_shaped(content):
        return False
    calls = record.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            return False
        for call in calls:
            if not isinstance(call, dict):
                return False
            function = call.get("function")
            if not (
                isinstance(call.get("id"), str)
                and isinstance(function, dict)
                and isinstance(function.get("name"), str)
                and isinstance(function.get("arguments", ""), str)
            ):
                return False
    if role == "tool" and not isinstance(record.get("tool_call_id"), str):
        return False
    return not (role in ("user", "tool") and content is None)


def _content_shaped(content: Any) -> bool:
    """Text, nothing, or a list of typed parts (text and images), as the chat API takes it."""
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict) and isinstance(part.get("type"), str) for part in content
    )


def read_session(path: Path) -> Loaded:
    """The parsed file at `path`; an empty session if there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Loaded([], 0, None, False, 0, False)
    return parse_session_bytes(data, str(path))


def append_lines(path: Path, lines: bytes, cut_at: int | None) -> int:
    """Append `lines`, first cutting a torn tail at `cut_at`; return the new file size."""
    fd = write_lines(path, lines, cut_at)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def write_lines(path: Path, lines: bytes, cut_at: int | None) -> int:
    """Write `lines` at the end of the file (cutting a torn tail at `cut_at` first), not yet
    synced; return the open descriptor, which the caller fsyncs and closes."""
    ensure_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        if cut_at is not None:
            os.ftruncate(fd, cut_at)
        before = os.fstat(fd).st_size
        view = memoryview(lines)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError:
            # A write cut short (disk full) must not leave half a line for the next append to be
            # glued onto: take the partial bytes back before reporting the error.
            os.ftruncate(fd, before)
            raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def move_to_archive(path: Path, archive: Path, stem: str, stamp: str) -> Path:
    """Move a session file under a name in `archive` that nobody holds (claimed by a hard link)."""
    ensure_private_dir(archive)
    serial = 1
    while True:
        suffix = "" if serial == 1 else f"-{serial}"
        target = archive / f"{stem}.{stamp}{suffix}{SUFFIX}"
        try:
            os.link(path, target)
        except FileExistsError:
            serial += 1
            continue
        os.unlink(path)
        fsync_dir(archive)
        fsync_dir(path.parent)
        return target


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as a JSON line (lone surrogates kept, as Python strings may carry them)."""
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode(
        "utf-8", errors="surrogatepass"
    )
