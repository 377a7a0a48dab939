"""The file tools: read_file, write_file, edit_file and list_dir, confined to one scope.

Paths are resolved with symlinks followed and checked against the turn's scope (gateway/tools/scope.py);
`..`, absolute paths and links that land outside it are refused. A tool's failure is returned to the
model as text. read_file and list_dir also reach the skills the chat is offered, read-only, at
`skills/<name>/...` (gateway/tools/skill_files.py). MEMORY.md is only ever compare-and-written:
write_file replaces it only if it still holds the text the turn last saw (`turn_memory`), so a
consolidation that landed meanwhile is never undone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.tools.registry import Tool, ToolError, ToolFunc
from gateway.tools.scope import PathRefusedError, ScopeGuard
from gateway.tools.skill_files import SkillFiles
from memory.errors import MemoryChangedError
from memory.fileio import atomic_write
from memory.files import MemoryFiles

log = logging.getLogger(__name__)

MAX_READ_CHARS = 50_000
MAX_LIST_ENTRIES = 500


@dataclass
class MemorySeen:
    """The MEMORY.md text the running turn last saw: in its prompt, by read_file, or as it wrote
    it (None: it has seen none)."""

    text: str | None = None


# The running turn's MemorySeen, set by the agent in the turn's own task. The tools run in worker
# threads with a copy of that context, so they update the one object rather than set the variable.
turn_memory: ContextVar[MemorySeen | None] = ContextVar("turn_memory", default=None)

MEMORY_CHANGED = (
    "memory/MEMORY.md changed since you last saw it (memgate may have added facts); read it "
    "again and make your change on top of what it holds now"
)


class WorkspaceFiles:
    """read_file, write_file, edit_file and list_dir, confined to what one scope may reach.

    MEMORY.md and HISTORY.md go through the memory writer: a rewrite of MEMORY.md keeps the previous
    text under memory/versions/ and happens only if the file still holds what the turn last saw
    (write_file) or what the edit was made on (edit_file); HISTORY.md only grows (a write that
    keeps its text and adds to the end is an append; anything else is refused).
    """

    def __init__(
        self, guard: ScopeGuard, memory: MemoryFiles, skills: SkillFiles | None = None
    ) -> None:
        self.guard = guard
        self.root = guard.root
        self.memory = memory
        self.skills = skills  # None: no skills' files beyond the scope's own

    def resolve(self, raw: Any, *, writing: bool = False) -> Path:
        try:
            return self.guard.resolve(raw, writing=writing)
        except PathRefusedError as exc:
            raise ToolError(str(exc)) from None

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root)) or "."

    def _reach(self, raw: Any, *, folder: bool = False) -> Path:
        """A path to read or list: the scope's own, else (where the scope refuses it or has no
        such file) the file of a skill this chat is offered. The caller checks that it exists."""
        if self.skills is None:
            return self.resolve(raw)
        try:
            path: Path | None = self.guard.resolve(raw)
            refusal = ""
        except PathRefusedError as exc:
            path, refusal = None, str(exc)
        if path is not None and path.exists():
            return path
        found = self.skills.resolve(raw)
        if found is None:
            if path is None:
                raise ToolError(refusal)
            return path
        if not (found.is_dir() if folder else found.is_file()):
            raise ToolError(f"no such {'directory' if folder else 'file'}: {str(raw).strip()}")
        return found

    def _read(self, arguments: dict[str, Any]) -> str:
        path = self._reach(arguments.get("path"))
        if not path.is_file():
            raise ToolError(f"no such file: {self.relative(path)}")
        memory = self.guard.same_file(path, self.memory.memory_md)
        with open(path, encoding="utf-8", errors="replace") as handle:
            # MEMORY.md whole: the turn has now seen this text, and a write_file compares with it.
            text = handle.read() if memory else handle.read(MAX_READ_CHARS + 1)
        seen = turn_memory.get()
        if memory and seen is not None:
            seen.text = text
        if len(text) > MAX_READ_CHARS:
            return text[:MAX_READ_CHARS] + f"\n[... truncated at {MAX_READ_CHARS} characters]"
        return text

    def _write(self, arguments: dict[str, Any]) -> str:
        path = self.resolve(arguments.get("path"), writing=True)
        content = arguments.get("content")
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        if path.is_dir():
            raise ToolError(f"{self.relative(path)} is a directory")
        if self.guard.same_file(path, self.memory.history_md):
            return self._append_history(content)
        if self.guard.same_file(path, self.memory.memory_md):
            return self._write_memory(content)
        self._replace(path, content)
        return f"Wrote {len(content)} characters to {self.relative(path)}"

    def _replace(self, path: Path, text: str) -> None:
        """Write a file; under memory/ (daily notes) through the one memory writer."""
        if self.guard.same_file(path.parent, self.memory.dir):
            self.memory.write_file(path, text)
        else:
            atomic_write(path, text)

    def _write_memory(self, text: str) -> str:
        seen = turn_memory.get()
        if seen is None or seen.text is None:
            raise ToolError("read memory/MEMORY.md before replacing it")
        kept = self._replace_memory(text, seen.text)
        if kept is None:
            return "memory/MEMORY.md already had this text; nothing changed"
        return (
            f"Wrote {len(text)} characters to memory/MEMORY.md (previous text kept as {kept.name})"
        )

    def _replace_memory(self, text: str, expected: str) -> Path | None:
        """Compare-and-write MEMORY.md: `text` replaces it only if it still holds `expected`
        (else the model is told to read it again), so a write landed since is never undone."""
        try:
            kept = self.memory.write_memory(text, expected=expected)
        except MemoryChangedError:
            raise ToolError(MEMORY_CHANGED) from None
        seen = turn_memory.get()
        # The turn knows the new text only if it had seen the one it replaced: after an edit of
        # text it never saw, a write_file of its older view must still be refused.
        if seen is not None and seen.text == expected:
            seen.text = text
        return kept

    def _append_history(self, content: str) -> str:
        current = self.memory.read_history()
        if not content.startswith(current):
            raise ToolError(
                "memory/HISTORY.md is append-only: write its current text followed by the new "
                "entry, or leave it to memgate"
            )
        entry = content[len(current) :].strip()
        if not entry:
            return "memory/HISTORY.md already had this text; nothing changed"
        self.memory.append_history(entry)
        return f"Appended {len(entry)} characters to memory/HISTORY.md"

    def _edit(self, arguments: dict[str, Any]) -> str:
        path = self.resolve(arguments.get("path"), writing=True)
        old, new = arguments.get("old_text"), arguments.get("new_text")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise ToolError("old_text (non-empty) and new_text must be strings")
        if not path.is_file():
            raise ToolError(f"no such file: {self.relative(path)}")
        if self.guard.same_file(path, self.memory.history_md):
            raise ToolError("memory/HISTORY.md is append-only: its entries cannot be edited")
        text = path.read_text(encoding="utf-8")
        count = text.count(old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times; give more context"
            raise ToolError(f"old_text {where} in {self.relative(path)}")
        if self.guard.same_file(path, self.memory.memory_md):
            self._replace_memory(text.replace(old, new, 1), text)
            return "Edited memory/MEMORY.md (previous text kept in memory/versions/)"
        self._replace(path, text.replace(old, new, 1))
        return f"Edited {self.relative(path)}"

    def _list(self, arguments: dict[str, Any]) -> str:
        path = self._reach(arguments.get("path") or ".", folder=True)
        if not path.is_dir():
            raise ToolError(f"not a directory: {self.relative(path)}")
        entries = sorted(path.iterdir(), key=lambda p: p.name)
        lines = [f"{e.name}/" if e.is_dir() else e.name for e in entries[:MAX_LIST_ENTRIES]]
        if len(entries) > MAX_LIST_ENTRIES:
            lines.append(f"[... {len(entries) - MAX_LIST_ENTRIES} more]")
        return "\n".join(lines) or "(empty)"

    def tools(self) -> list[Tool]:
        def threaded(func: Callable[[dict[str, Any]], str]) -> ToolFunc:
            async def run(arguments: dict[str, Any]) -> str:
                return await asyncio.to_thread(func, arguments)

            return run

        path = {"type": "string", "description": "Path relative to the workspace"}
        return [
            Tool(
                "read_file",
                "Read a text file from the workspace.",
                {"type": "object", "properties": {"path": path}, "required": ["path"]},
                threaded(self._read),
            ),
            Tool(
                "write_file",
                "Create or replace a text file in the workspace.",
                {
                    "type": "object",
                    "properties": {"path": path, "content": {"type": "string"}},
                    "required": ["path", "content"],
                },
                threaded(self._write),
            ),
            Tool(
                "edit_file",
                "Replace one exact occurrence of old_text with new_text in a workspace file.",
                {
                    "type": "object",
                    "properties": {
                        "path": path,
                        "old_text": {"type": "string"},
                        "new_text": {"type": "string"},
                    },
                    "required": ["path", "old_text", "new_text"],
                },
                threaded(self._edit),
            ),
            Tool(
                "list_dir",
                "List the entries of a workspace directory.",
                {"type": "object", "properties": {"path": path}, "required": []},
                threaded(self._list),
            ),
        ]
