"""What memory search indexes: the workspace files it reads and the entries it cuts them into.

HISTORY.md and daily notes are cut at blank lines, MEMORY.md at its headings, session files (live and
archived) into one entry per user or assistant message. Tool results, metadata and marker lines are
left out: a tool result repeats a file that is indexed anyway, and indexing memory_search's own output
would make every search find its earlier searches. Parsing works on bytes from a cursor, so an append
to HISTORY.md or to a session is parsed from where the previous parse stopped.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from pathlib import Path
from stat import S_ISREG
from typing import Any

MAX_CHUNK_CHARS = 2_000  # a longer paragraph or section is indexed in pieces, each with its line
MAX_MESSAGE_CHARS = 20_000  # the rest of a huge message is not worth indexing
_NOTE_NAME = re.compile(r"(\d{4})-(\d{2})-(\d{2})\.md")
_STAMP = re.compile(r"\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2})\]")
# The job tag consolidation puts under a HISTORY.md entry: bookkeeping, not something to find.
_ENTRY_TAG = re.compile(r"^<!-- memgate:[0-9a-f]+ -->$")
_HEADING = re.compile(r"#{1,2} ")


@dataclass(frozen=True)
class Source:
    """One indexed file; `kind` is history, memory, note or session."""

    relative: str  # POSIX path relative to the workspace, as hits show it
    path: str  # absolute
    kind: str

    @property
    def appendable(self) -> bool:
        """HISTORY.md and sessions only grow, so an append is parsed from the last cursor."""
        return self.kind in ("history", "session")


@dataclass(frozen=True)
class Cursor:
    """Where parsing of an append-only file resumes: byte offset, line number, last date seen."""

    offset: int = 0
    line: int = 1
    ts: float | None = None


@dataclass(frozen=True)
class Entry:
    """One searchable piece of a file; `kind` is history, memory, note, user or assistant."""

    offset: int
    line: int
    ts: float | None
    kind: str
    text: str


@dataclass(frozen=True)
class _Line:
    offset: int
    number: int
    text: str
    end: int  # byte offset just after the line and its newline
    complete: bool  # ends with a newline

    @property
    def blank(self) -> bool:
        return not self.text.strip()


def roots(workspace: Path) -> tuple[Path, ...]:
    """The directories whose files search may index and memory_get may read, symlinks resolved."""
    return ((workspace / "memory").resolve(), (workspace / "sessions").resolve())


def is_inside(path: Path, allowed: tuple[Path, ...]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in allowed)


def _memory_kind(name: str) -> str | None:
    if name == "MEMORY.md":
        return "memory"
    if name == "HISTORY.md":
        return "history"
    return "note" if _NOTE_NAME.fullmatch(name) else None


def _session_kind(name: str) -> str | None:
    return "session" if name.endswith(".jsonl") else None


# The folders whose files search indexes (a folder's own files: the archive is a folder of its
# own), each with how it tells a file's kind from its name.
_KINDS: dict[str, Callable[[str], str | None]] = {
    "memory": _memory_kind,
    "sessions": _session_kind,
    "sessions/archive": _session_kind,
}
FOLDERS = tuple(_KINDS)


def scan(
    workspace: Path, folders: tuple[str, ...] = FOLDERS
) -> dict[str, tuple[str, str, os.stat_result]]:
    """Every file search indexes in `folders`: its relative path to its absolute path, kind and
    stat; links that lead outside memory/ and sessions/ are skipped. Plain tuples: it runs before
    searches, over every session file of the workspace."""
    allowed = roots(workspace)
    found: dict[str, tuple[str, str, os.stat_result]] = {}
    # os.scandir: one stat per file, and symlinks are known from the directory entry itself.
    for folder in folders:
        pick = _KINDS[folder]
        try:
            listing = os.scandir(workspace / folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with listing:
            for item in listing:
                kind = pick(item.name)
                if kind is None:
                    continue
                try:
                    if item.is_symlink() and not is_inside(Path(item.path).resolve(), allowed):
                        continue
                    stat = item.stat()
                except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11)
                    continue
                if S_ISREG(stat.st_mode):
                    found[f"{folder}/{item.name}"] = (item.path, kind, stat)
    return found


def scan_files(
    workspace: Path, relatives: Iterable[str]
) -> dict[str, tuple[str, str, os.stat_result]]:
    """As `scan`, for the named files alone (relative paths as `scan` gives them): those that
    exist and that search indexes."""
    allowed = roots(workspace)
    found: dict[str, tuple[str, str, os.stat_result]] = {}
    for relative in relatives:
        folder, _, name = relative.rpartition("/")
        pick = _KINDS.get(folder)
        kind = pick(name) if pick is not None else None
        if kind is None:
            continue
        path = str(workspace / folder / name)
        try:
            if os.path.islink(path) and not is_inside(Path(path).resolve(), allowed):
                continue
            stat = os.stat(path)
        except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11)
            continue
        if S_ISREG(stat.st_mode):
            found[relative] = (path, kind, stat)
    return found


def parse(
    source: Source, data: bytes, start: Cursor, tz: tzinfo, mtime: float
) -> tuple[list[Entry], Cursor]:
    """Entries of `data` (the file's bytes from `start.offset`) and where the next parse resumes."""
    lines = list(_lines(data, start))
    if source.kind == "session":
        return _session(lines, start, tz)
    if source.kind == "history":
        return _history(lines, start, tz)
    if source.kind == "memory":
        return _memory(lines, mtime), start
    day = note_day(source.relative.rpartition("/")[2])
    ts = datetime(day.year, day.month, day.day, tzinfo=tz).timestamp() if day else None
    entries = [e for block in _blocks(lines) for e in _chunks(block, "note", ts)]
    return entries, start


def _lines(data: bytes, start: Cursor) -> Iterator[_Line]:
    position, number = 0, start.line
    while position < len(data):
        newline = data.find(b"\n", position)
        end = len(data) if newline < 0 else newline + 1
        raw = data[position:end].rstrip(b"\r\n")
        text = raw.decode("utf-8", "replace")
        yield _Line(start.offset + position, number, text, start.offset + end, newline >= 0)
        position, number = end, number + 1


def _blocks(lines: list[_Line]) -> list[list[_Line]]:
    """Runs of non-blank lines: paragraphs."""
    blocks: list[list[_Line]] = []
    current: list[_Line] = []
    for line in lines:
        if line.blank:
            if current:
                blocks.append(current)
                current = []
        else:
            current.append(line)
    if current:
        blocks.append(current)
    return blocks


def _chunks(
    block: list[_Line], kind: str, ts: float | None, heading: str | None = None
) -> list[Entry]:
    """A block as entries of at most MAX_CHUNK_CHARS; later pieces repeat the heading for context."""
    entries: list[Entry] = []
    piece: list[_Line] = []
    size = 0

    def emit() -> None:
        text = "\n".join(line.text for line in piece)
        if heading and piece[0].text != heading:
            text = f"{heading}\n{text}"
        entries.append(Entry(piece[0].offset, piece[0].number, ts, kind, text))

    for line in block:
        if piece and size + len(line.text) > MAX_CHUNK_CHARS:
            emit()
            piece, size = [], 0
        piece.append(line)
        size += len(line.text) + 1
    if piece:
        emit()
    return entries


def _stamp(text: str, tz: tzinfo) -> float | None:
    match = _STAMP.match(text)
    if match is None:
        return None
    try:
        year, month, day, hour, minute = (int(part) for part in match.groups())
        return datetime(year, month, day, hour, minute, tzinfo=tz).timestamp()
    except ValueError:
        return None


def _history(lines: list[_Line], start: Cursor, tz: tzinfo) -> tuple[list[Entry], Cursor]:
    """Paragraphs dated by their `[YYYY-MM-DD HH:MM]` (an undated one keeps the previous date).

    The last paragraph is provisional until a blank line follows it: the next parse starts there
    again, so an entry caught half-written is indexed whole once it is complete.
    """
    entries: list[Entry] = []
    ts = start.ts
    resume = start
    blocks = _blocks(lines)
    for block in blocks:
        resume = Cursor(block[0].offset, block[0].number, ts)
        ts = _stamp(block[0].text, tz) or ts
        text_lines = [line for line in block if not _ENTRY_TAG.match(line.text)]
        if text_lines:
            entries.extend(_chunks(text_lines, "history", ts))
    finished = [line for line in lines if line.complete]
    if (
        finished
        and finished[-1].blank
        and (not blocks or finished[-1].offset > blocks[-1][-1].offset)
    ):
        resume = Cursor(finished[-1].end, finished[-1].number + 1, ts)
    return entries, resume


def _memory(lines: list[_Line], mtime: float) -> list[Entry]:
    """One entry per `#`/`##` section (split further if long), dated by the file's mtime."""
    sections: list[list[_Line]] = []
    for line in lines:
        if not sections or _HEADING.match(line.text):
            sections.append([])
        sections[-1].append(line)
    entries: list[Entry] = []
    for section in sections:
        body = [line for line in section if not line.blank]
        if not body:
            continue
        heading = body[0].text if _HEADING.match(body[0].text) else None
        entries.extend(_chunks(body, "memory", mtime, heading))
    return entries


def _session(lines: list[_Line], start: Cursor, tz: tzinfo) -> tuple[list[Entry], Cursor]:
    """One entry per user or assistant message with text; a line still being written waits."""
    entries: list[Entry] = []
    resume = start
    ts = start.ts
    for line in lines:
        if not line.complete:
            break
        record = _json(line.text)
        if record is not None:
            stamp = _iso(record.get("timestamp") or record.get("created_at"), tz)
            ts = stamp if stamp is not None else ts
            role = record.get("role")
            if "_type" not in record and role in ("user", "assistant"):
                text = _message_text(record.get("content"))[:MAX_MESSAGE_CHARS]
                if text.strip():
                    entries.append(Entry(line.offset, line.number, ts, role, text))
        resume = Cursor(line.end, line.number + 1, ts)
    return entries, resume


def _json(text: str) -> dict[str, Any] | None:
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder recurses
        return None
    return record if isinstance(record, dict) else None


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _iso(value: Any, tz: tzinfo) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return moment.timestamp()


def note_day(name: str) -> date | None:
    match = _NOTE_NAME.fullmatch(name)
    if match is None:
        return None
    try:
        return date(*map(int, match.groups()))
    except ValueError:
        return None
