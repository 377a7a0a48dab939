"""A small index beside each session file, so that loading a session costs what a turn can use.

A turn needs the messages from the consolidation pointer on (and the most recent few hundred, which
replayed messages are matched against), the owed answers and the delivered marks. The index, one
JSON file in `sessions/.index/`, tells where in the session file that part starts, the message count
and pointer up to the size it describes, and the answers before that part still owed. It is a cache:
the session file alone is the truth. Before use the index is checked against the file (same first
line, same bytes before its size, the same number of messages in between); when it is missing, stale
or wrong the whole file is read once, in the caller's thread, and the index written again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memory.fileio import atomic_write
from memory.sessions.file import Loaded, Message, parse_session_bytes

log = logging.getLogger(__name__)

INDEX_DIR = ".index"
KEEP_RECENT = 200  # messages always loaded before the end, whatever the pointer (replay dedupe)
_VERSION = 1
_HEAD_LIMIT = 65536  # a first line longer than this is checked by its first bytes only
_TAIL = 256  # bytes before the indexed size that must not have changed


@dataclass(frozen=True)
class SessionIndex:
    """Where a session file's loaded part starts, valid while the file only grew past `size`."""

    size: int  # bytes of complete lines described
    head: str  # digest of the file's first line
    tail: str  # digest of the `_TAIL` bytes before `size`
    messages: int  # message lines in the first `size` bytes
    pointer: int  # the consolidation pointer in those bytes
    base: int  # first message loaded
    base_offset: int  # byte offset of message `base` (or `size` when base == messages)
    owed: list[Message]  # stored answers before `base` not marked delivered within `size`


def index_path(session_path: Path) -> Path:
    return session_path.parent / INDEX_DIR / (session_path.name + ".json")


def base_for(pointer: int, messages: int, keep: int = KEEP_RECENT) -> int:
    """The first message a session loads: the pointer, or earlier to keep the `keep` last ones."""
    return max(0, min(pointer, messages - keep))


def load_session(path: Path, keep: int = KEEP_RECENT) -> Loaded:
    """The session at `path` from its loaded part on; reads the whole file when it must."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return Loaded([], 0, None, False, 0, False)
    with os.fdopen(fd, "rb") as handle:
        index = _read_index(path)
        if index is not None:
            loaded = _load_from(handle, index, str(path))
            if loaded is not None:
                return loaded
        handle.seek(0)
        data = handle.read()
    loaded = trim(parse_session_bytes(data, str(path)), keep)
    if loaded.base:  # from the first message on, the whole file is read anyway: no index needed
        head = data[:_HEAD_LIMIT].split(b"\n", 1)[0]
        tail = data[max(0, loaded.good_size - _TAIL) : loaded.good_size]
        save_index(path, build_index(loaded, head, tail))
    return loaded


def trim(whole: Loaded, keep: int = KEEP_RECENT) -> Loaded:
    """A fully parsed session cut to what a turn can use (from `base_for`)."""
    base = base_for(whole.last_consolidated, len(whole.messages), keep)
    return Loaded(
        whole.messages[base:],
        whole.last_consolidated,
        whole.created_at,
        whole.group,
        whole.good_size,
        whole.torn,
        whole.key,
        whole.delivered,
        base,
        whole.offsets[base:],
        whole.marker,
        owed_among(whole.messages[:base], whole.delivered),
    )


def owed_among(messages: Iterable[Message], delivered: set[str]) -> list[Message]:
    """Stored answers recorded as owed (they carry a reply id) and never marked delivered."""
    return [
        m
        for m in messages
        if m.get("role") == "assistant" and m.get("reply_id") and m["reply_id"] not in delivered
    ]


def build_index(loaded: Loaded, head: bytes, tail: bytes) -> SessionIndex:
    """The index of a session parsed from `loaded.base` on; `head` is the file's first line and
    `tail` the bytes before `loaded.good_size`."""
    return SessionIndex(
        size=loaded.good_size,
        head=_digest(head),
        tail=_digest(tail),
        messages=loaded.base + len(loaded.messages),
        pointer=loaded.last_consolidated,
        base=loaded.base,
        base_offset=loaded.offsets[0] if loaded.messages else loaded.good_size,
        owed=loaded.earlier_owed,
    )


def file_ends(path: Path, size: int) -> tuple[bytes, bytes]:
    """The first line of the file and the bytes before `size`, as `build_index` takes them."""
    with path.open("rb") as handle:
        head = handle.read(_HEAD_LIMIT).split(b"\n", 1)[0]
        handle.seek(max(0, size - _TAIL))
        return head, handle.read(size - max(0, size - _TAIL))


def save_index(session_path: Path, index: SessionIndex) -> None:
    """Write the index; a failure costs only speed (the next load reads the whole file)."""
    try:
        atomic_write(index_path(session_path), json.dumps(asdict(index), ensure_ascii=False))
    except (OSError, ValueError) as exc:
        log.warning("session index not written file=%s error=%s", session_path, exc)


def drop_index(session_path: Path) -> None:
    """Forget the index of a file that moves away (a new file may later take its name)."""
    try:
        index_path(session_path).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("session index not removed file=%s error=%s", session_path, exc)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_index(path: Path) -> SessionIndex | None:
    try:
        raw: Any = json.loads(index_path(path).read_bytes())
        index = SessionIndex(**raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        log.warning("session index unreadable, reading the whole file file=%s error=%s", path, exc)
        return None
    numbers = (index.size, index.messages, index.pointer, index.base, index.base_offset)
    if not all(isinstance(n, int) and n >= 0 for n in numbers):
        return None
    if not (isinstance(index.head, str) and isinstance(index.tail, str)):
        return None
    if not (isinstance(index.owed, list) and all(isinstance(m, dict) for m in index.owed)):
        return None
    if index.base > index.messages or index.base_offset > index.size:
        return None
    return index


def _load_from(handle: Any, index: SessionIndex, origin: str) -> Loaded | None:
    """The session from `index.base` on, or None when the index does not describe this file."""
    if os.fstat(handle.fileno()).st_size < index.size:
        return None
    first = handle.read(_HEAD_LIMIT).split(b"\n", 1)[0]
    if _digest(first) != index.head:
        return None
    handle.seek(max(0, index.size - _TAIL))
    if _digest(handle.read(index.size - max(0, index.size - _TAIL))) != index.tail:
        return None
    if index.base_offset:
        handle.seek(index.base_offset - 1)
        if handle.read(1) != b"\n":
            return None
    handle.seek(index.base_offset)
    tail = parse_session_bytes(handle.read(), origin, offset=index.base_offset, base=index.base)
    within = sum(1 for at in tail.offsets if at < index.size)
    if index.base + within != index.messages:
        return None
    if tail.marker is not None and tail.marker < index.base:
        return None  # the pointer went back before the loaded part: only the whole file will do
    meta = parse_session_bytes(first + b"\n", origin) if first else None
    pointer = index.pointer if tail.marker is None else tail.marker
    count = index.base + len(tail.messages)
    return Loaded(
        tail.messages,
        min(pointer, count),
        meta.created_at if meta else None,
        bool(meta and meta.group),
        tail.good_size,
        tail.torn,
        meta.key if meta else None,
        tail.delivered,
        index.base,
        tail.offsets,
        pointer,
        owed_among(index.owed, tail.delivered),
    )
