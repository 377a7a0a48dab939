"""The Markdown memory files of a workspace: MEMORY.md, HISTORY.md, daily notes, versions (SPEC §2, §4).

Writes are atomic (temp file, fsync, rename) so a crash leaves either the old or the new text,
and every rewrite of MEMORY.md keeps the previous text under `memory/versions/`.
"""

from __future__ import annotations

import asyncio
import os
from datetime import date, datetime, tzinfo
from pathlib import Path

from memory.errors import VersionNotFoundError
from memory.fileio import FILE_MODE, atomic_write, ensure_private_dir

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
    """Append `text` with a single write and flush it to disk."""
    ensure_private_dir(path.parent)
    # Created owner-only: the umask can only take bits away from 0600.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    with open(fd, "a", encoding="utf-8", newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


class MemoryFiles:
    """Paths and operations for `WORKSPACE/memory/`."""

    def __init__(self, workspace: Path, tz: tzinfo) -> None:
        self.workspace = workspace
        self.tz = tz
        self.dir = workspace / "memory"
        self.memory_md = self.dir / "MEMORY.md"
        self.history_md = self.dir / "HISTORY.md"
        self.versions = self.dir / "versions"

    # -- MEMORY.md ---------------------------------------------------------------------------------
    def ensure(self) -> None:
        """Create MEMORY.md from the template if it is missing."""
        if self.memory_md.exists() and self.memory_md.stat().st_size > 0:
            return
        ensure_private_dir(self.dir)
        # Written whole to a temp file, then linked into place: never an empty MEMORY.md, and
        # never over a file someone created meanwhile (an empty one is replaced).
        tmp = self.dir / f".MEMORY.md.{os.getpid()}.new"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            with open(fd, "w", encoding="utf-8") as handle:
                handle.write(MEMORY_TEMPLATE)
                handle.flush()
                os.fsync(handle.fileno())
            if self.memory_md.exists() and self.memory_md.stat().st_size == 0:
                os.replace(tmp, self.memory_md)
            else:
                try:
                    os.link(tmp, self.memory_md)
                except FileExistsError:
                    pass
        finally:
            tmp.unlink(missing_ok=True)

    def read_memory(self) -> str:
        self.ensure()
        return self.memory_md.read_text(encoding="utf-8")

    def write_memory(self, text: str) -> Path | None:
        """Replace MEMORY.md atomically, keeping the previous text; return the version's path."""
        previous = self.memory_md.read_text(encoding="utf-8") if self.memory_md.exists() else None
        if previous == text:
            return None
        kept = None
        if previous is not None:
            kept = self._version_path()
            atomic_write(kept, previous)
        atomic_write(self.memory_md, text)
        return kept

    def _version_path(self) -> Path:
        stamp = datetime.now(self.tz).strftime("%Y%m%dT%H%M%S")
        candidate = self.versions / f"MEMORY.{stamp}.md"
        serial = 1
        while candidate.exists():
            serial += 1
            candidate = self.versions / f"MEMORY.{stamp}-{serial}.md"
        return candidate

    def list_versions(self) -> list[Path]:
        """Kept versions, oldest first."""
        if not self.versions.is_dir():
            return []
        return sorted(self.versions.glob("MEMORY.*.md"), key=lambda p: (p.stat().st_mtime, p.name))

    def restore(self, name: str | None = None) -> Path:
        """Make a kept version current (the newest if `name` is None); the current text is kept."""
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
        self.write_memory(chosen.read_text(encoding="utf-8"))
        return chosen

    # -- HISTORY.md --------------------------------------------------------------------------------
    def append_history(self, entry: str) -> None:
        """Append one entry followed by a blank line."""
        append_text(self.history_md, entry.rstrip() + "\n\n")

    def read_history(self) -> str:
        return self.history_md.read_text(encoding="utf-8") if self.history_md.exists() else ""

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

    async def awrite_memory(self, text: str) -> Path | None:
        return await asyncio.to_thread(self.write_memory, text)

    async def aappend_history(self, entry: str) -> None:
        await asyncio.to_thread(self.append_history, entry)
