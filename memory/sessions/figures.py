"""A session's figures for `memgate status` (messages, consolidation pointer, owed answers, a turn
cut short), kept in one cache file so that status reads only what was appended since it last looked.

Session files only grow (a rotation or a repair makes a new file): an entry is kept while the file
has the same inode, is no shorter, and has the same bytes before the size it describes; then only
the lines after that size are parsed. Anything else (a new file, a cache missing or unreadable) is
read once through the session index (`load_session`). The cache is only a cache: a failure to
write it costs the next status its speed. Imports `memory.fileio` and `memory.sessions` of ours.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memory.fileio import atomic_write
from memory.sessions.file import Loaded, parse_session_bytes
from memory.sessions.index import load_session, owed_among

log = logging.getLogger(__name__)

_TAIL = 256  # bytes before the described size that must not have changed
_VERSION = 2  # 2: the last message's time and the group flag (for the console's Chats page)


@dataclass
class Figures:
    """One session file's figures, as of its first `size` bytes."""

    ino: int
    size: int  # bytes of complete lines described
    tail: str  # digest of the `_TAIL` bytes before `size`
    messages: int
    pointer: int  # the consolidation pointer
    owed: list[str] = field(default_factory=list)  # reply ids stored as owed, never delivered
    interrupted: bool = False  # the session ends in tool steps: a turn a restart stopped
    last_active: str = ""  # the last message's timestamp (else the file's creation)
    group: bool = False  # a group's or a guest's words are in it

    @property
    def pending(self) -> int:
        """Messages past the consolidation pointer."""
        return self.messages - self.pointer


class FiguresCache:
    """The figures of every session file status looked at, by path, in one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, Figures] = {}
        self._changed = False
        self.parsed_bytes = 0  # bytes parsed by this instance (what status cost)
        try:
            raw: Any = json.loads(path.read_bytes())
            if raw.get("version") == _VERSION:
                self._entries = {name: Figures(**entry) for name, entry in raw["files"].items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            log.warning("session figures unreadable, reading sessions again path=%s error=%s",
                        path, exc)  # fmt: skip

    def figures(self, session: Path) -> Figures:
        """`session`'s figures now; a file that is gone has none (zeros)."""
        name = str(session)
        try:
            fd = os.open(session, os.O_RDONLY)
        except FileNotFoundError:
            self._forget(name)
            return Figures(0, 0, "", 0, 0)
        with os.fdopen(fd, "rb") as handle:
            stat = os.fstat(handle.fileno())
            known = self._entries.get(name)
            if known is not None and known.ino == stat.st_ino and stat.st_size >= known.size:
                handle.seek(max(0, known.size - _TAIL))
                if _digest(handle.read(known.size - max(0, known.size - _TAIL))) == known.tail:
                    if stat.st_size == known.size:
                        return known
                    grown = handle.read()  # from known.size on
                    self.parsed_bytes += len(grown)
                    return self._keep(name, _grow(known, grown, name, handle))
            loaded = load_session(session)  # through its index: the loaded part only
            self.parsed_bytes += loaded.good_size - (loaded.offsets[0] if loaded.offsets else 0)
            return self._keep(name, _from_loaded(loaded, stat.st_ino, handle))

    def save(self) -> None:
        """Write the cache if anything changed; a failure is logged (it only costs speed)."""
        if not self._changed:
            return
        files = {name: asdict(entry) for name, entry in self._entries.items()}
        try:
            atomic_write(self.path, json.dumps({"version": _VERSION, "files": files}))
        except OSError as exc:
            log.warning("session figures not written path=%s error=%s", self.path, exc)

    def keep_only(self, sessions: set[str]) -> None:
        """Forget the files not in `sessions` (moved or deleted), so the cache does not grow."""
        for name in [n for n in self._entries if n not in sessions]:
            self._forget(name)

    def _keep(self, name: str, figures: Figures) -> Figures:
        self._entries[name] = figures
        self._changed = True
        return figures

    def _forget(self, name: str) -> None:
        if self._entries.pop(name, None) is not None:
            self._changed = True


def _grow(known: Figures, grown: bytes, origin: str, handle: Any) -> Figures:
    """`known` with the lines appended after it."""
    tail = parse_session_bytes(grown, origin, offset=known.size, base=known.messages)
    messages = known.messages + len(tail.messages)
    pointer = known.pointer if tail.marker is None else tail.marker
    owed = [reply for reply in known.owed if reply not in tail.delivered]
    owed += [str(m["reply_id"]) for m in owed_among(tail.messages, tail.delivered)]
    interrupted = _ends_in_steps(tail) if tail.messages else known.interrupted
    last = _last_active(tail) or known.last_active
    size = tail.good_size
    return Figures(known.ino, size, _tail_digest(handle, size), messages, min(pointer, messages),
                   owed, interrupted, last, known.group or tail.group)  # fmt: skip


def _from_loaded(loaded: Loaded, ino: int, handle: Any) -> Figures:
    messages = loaded.base + len(loaded.messages)
    owed = owed_among([*loaded.earlier_owed, *loaded.messages], loaded.delivered)
    size = loaded.good_size
    return Figures(ino, size, _tail_digest(handle, size), messages, loaded.last_consolidated,
                   [str(m["reply_id"]) for m in owed], _ends_in_steps(loaded),
                   _last_active(loaded) or str(loaded.created_at or ""), loaded.group)  # fmt: skip


def _last_active(loaded: Loaded) -> str:
    return str(loaded.messages[-1].get("timestamp") or "") if loaded.messages else ""


def _ends_in_steps(loaded: Loaded) -> bool:
    last = loaded.messages[-1] if loaded.messages else None
    return last is not None and (last.get("role") == "tool" or bool(last.get("tool_calls")))


def _tail_digest(handle: Any, size: int) -> str:
    handle.seek(max(0, size - _TAIL))
    return _digest(handle.read(size - max(0, size - _TAIL)))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
