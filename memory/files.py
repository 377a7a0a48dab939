"""The Markdown memory files of a workspace: MEMORY.md, HISTORY.md, daily notes, versions.

`MemoryFiles` is the one writer of memory/: writes are serialised, atomic (temp file, fsync,
rename) so a crash leaves either the old or the new text, and every rewrite of MEMORY.md keeps the
previous text under `memory/versions/`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from datetime import date, datetime, tzinfo
from pathlib import Path

from memory.errors import MemoryChangedError, VersionNotFoundError
from memory.fileio import FILE_MODE, atomic_write, create_exclusive, ensure_private_dir

# How far back from the end of HISTORY.md a retried job looks for its own entry.
HISTORY_TAIL_BYTES = 256 * 1024

MEMORY_TEMPLATE = """\
# Long-term Memory

Facts worth keeping across conversations. memgate updates this file as it consolidates; you may edit it too.

## User Information

(Who the user is: name, location, work, people they mention.)

## Preferences

(How the user likes things done: tone, formats, tools, habits.)

## Project Context

(Ongoing projects, goals and their current state.)

## Important Notes

(Anything else worth remembering.)
"""


def append_text(path: Path, text: str) -> None:
    """Append `text` with a single write and flush it to disk (a new file is 0600)."""
    ensure_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    try:
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def entry_marker(entry_id: str) -> str:
    """The line that tags a HISTORY.md entry with the job that wrote it (invisible in Markdown)."""
    return f"<!-- memgate:{entry_id} -->"


class MemoryFiles:
    """Paths and operations for `WORKSPACE/memory/`, and its one writer.

    Every write to memory/ goes through this object's lock, whichever thread makes it
    (consolidation workers, the model's tools, the CLI): a compare-and-write of MEMORY.md is one
    critical section, and version names are claimed with an exclusive create.
    """

    def __init__(self, workspace: Path, tz: tzinfo) -> None:
        self.workspace = workspace
        self.tz = tz
        self.dir = workspace / "memory"
        self.memory_md = self.dir / "MEMORY.md"
        self.history_md = self.dir / "HISTORY.md"
        self.versions = self.dir / "versions"
        # A thread lock, not an asyncio one: the writes run in worker threads (asyncio.to_thread)
        # and in the synchronous CLI alike. Re-entrant so restore() can call write_memory().
        self._writing = threading.RLock()

    # -- MEMORY.md ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        """Create MEMORY.md from the template if it is missing or empty."""
        with self._writing:
            if self.memory_md.exists() and self.memory_md.stat().st_size > 0:
                return
            atomic_write(self.memory_md, MEMORY_TEMPLATE)

    def read_memory(self) -> str:
        self.ensure()
        return self.memory_md.read_text(encoding="utf-8")

    def write_memory(self, text: str, *, expected: str | None = None) -> Path | None:
        """Replace MEMORY.md atomically, keeping the previous text; return the version's path.

        With `expected`, the write happens only if MEMORY.md still holds exactly that text, checked
        under the same lock as the write; otherwise MemoryChangedError is raised and nothing changes.
        """
        with self._writing:
            try:
                previous: str | None = self.memory_md.read_text(encoding="utf-8")
            except FileNotFoundError:
                previous = None
            if expected is not None and previous is not None and previous != expected:
                raise MemoryChangedError("MEMORY.md changed since it was read")
            if previous == text:
                return None
            kept = self._keep_version(previous) if previous is not None else None
            atomic_write(self.memory_md, text)
            return kept

    def _keep_version(self, text: str) -> Path:
        """Store `text` under a version name nobody else holds (claimed by exclusive create)."""
        stamp = datetime.now(self.tz).strftime("%Y%m%dT%H%M%S")
        serial = 1
        while True:
            suffix = "" if serial == 1 else f"-{serial}"
            candidate = self.versions / f"MEMORY.{stamp}{suffix}.md"
            try:
                create_exclusive(candidate, text)
            except FileExistsError:
                serial += 1
                continue
            return candidate

    def list_versions(self) -> list[Path]:
        """Kept versions, oldest first."""
        if not self.versions.is_dir():
            return []
        return sorted(self.versions.glob("MEMORY.*.md"), key=lambda p: (p.stat().st_mtime, p.name))

    def restore(self, name: str | None = None, *, expected: str | None = None) -> Path:
        """Make a kept version current (the newest if `name` is None); the current text is kept.

        With `expected`, a compare-and-write as in write_memory: MemoryChangedError, and nothing
        changes, if MEMORY.md no longer holds that text (a consolidation landed meanwhile)."""
        with self._writing:
            versions = self.list_versions()
            if not versions:
                raise VersionNotFoundError("no previous versions of MEMORY.md are kept yet")
            if name is None:
                chosen = versions[-1]
            else:
                matches = [v for v in versions if v.name == name or v.name == f"MEMORY.{name}.md"]
                if not matches:
                    raise VersionNotFoundError(f"no version named {name!r} in {self.versions}")
                chosen = matches[0]
            self.write_memory(chosen.read_text(encoding="utf-8"), expected=expected)
            return chosen

    # -- HISTORY.md --------------------------------------------------------------------------------
    def append_history(self, entry: str, *, entry_id: str | None = None) -> bool:
        """Append one entry followed by a blank line; False if `entry_id` is already there.

        An entry with an id carries it as an HTML comment on its last line, and the tail of the
        file is checked under the writer's lock first: a retried job never appends twice.
        """
        text = entry.rstrip()
        with self._writing:
            if entry_id is not None:
                marker = entry_marker(entry_id)
                if marker in self._history_tail():
                    return False
                text = f"{text}\n{marker}"
            append_text(self.history_md, text + "\n\n")
            return True

    def _history_tail(self) -> str:
        try:
            with open(self.history_md, "rb") as handle:
                handle.seek(max(0, os.fstat(handle.fileno()).st_size - HISTORY_TAIL_BYTES))
                return handle.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def read_history(self) -> str:
        return self.history_md.read_text(encoding="utf-8") if self.history_md.exists() else ""

    # -- any other file under memory/ (daily notes, files the model keeps there) ----------------
    def write_file(self, path: Path, text: str, *, expected: str | None = None) -> None:
        """Replace a file under memory/ atomically, serialised with every other memory write.

        With `expected`, only if the file still holds that text (a missing file holds ""); else
        MemoryChangedError is raised and nothing changes.
        """
        if not path.resolve().is_relative_to(self.dir.resolve()):
            raise ValueError(f"{path} is not under {self.dir}")
        with self._writing:
            if expected is not None:
                current = path.read_text(encoding="utf-8") if path.exists() else ""
                if current != expected:
                    raise MemoryChangedError(f"{path.name} changed since it was read")
            atomic_write(path, text)

    # -- daily notes -------------------------------------------------------------------------------
    def today(self) -> date:
        return datetime.now(self.tz).date()

    def daily_note_path(self, day: date | None = None) -> Path:
        return self.dir / f"{(day or self.today()).isoformat()}.md"

    def read_daily_note(self, day: date | None = None) -> str:
        path = self.daily_note_path(day)
        return path.read_text(encoding="utf-8") if path.exists() else ""

    # -- async wrappers: file work stays off the event loop ----------------------------------------
    async def aread_memory(self) -> str:
        return await asyncio.to_thread(self.read_memory)

    async def awrite_memory(self, text: str, *, expected: str | None = None) -> Path | None:
        return await asyncio.to_thread(lambda: self.write_memory(text, expected=expected))

    async def aappend_history(self, entry: str, *, entry_id: str | None = None) -> bool:
        return await asyncio.to_thread(lambda: self.append_history(entry, entry_id=entry_id))
