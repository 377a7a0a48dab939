"""The agent's tools: file access confined to the workspace, and the registry that runs them.

Paths are resolved with symlinks followed and must land inside the workspace; `..`, absolute paths
and links pointing outside are refused. A tool's failure is returned to the model as text.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory.fileio import atomic_write

log = logging.getLogger(__name__)

MAX_READ_CHARS = 50_000
MAX_LIST_ENTRIES = 500
# Files memgate appends to itself; the model may read them but not overwrite them.
_READ_ONLY_DIRS = ("sessions", ".index", ".state")


class ToolError(Exception):
    """A tool could not do what was asked; the message goes back to the model."""


ToolFunc = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFunc

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    """Named tools with their JSON schemas."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self._tools.values()]

    def names(self) -> list[str]:
        return list(self._tools)

    async def execute(self, name: str, raw_arguments: str) -> str:
        """Run a tool; every failure becomes an `Error: …` text for the model."""
        tool = self._tools.get(name)
        if tool is None:
            log.warning("model called an unknown tool tool=%s", name[:64])
            return f"Error: unknown tool {name!r}. Available: {', '.join(self._tools)}"
        try:
            arguments = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as exc:
            log.warning("model sent arguments that are not JSON tool=%s error=%s", name, exc.msg)
            return f"Error: arguments are not valid JSON ({exc.msg})"
        if not isinstance(arguments, dict):
            log.warning("model sent arguments that are not an object tool=%s", name)
            return "Error: arguments must be a JSON object"
        missing = [k for k in tool.parameters.get("required", []) if k not in arguments]
        if missing:
            log.warning("model left out arguments tool=%s missing=%s", name, ",".join(missing))
            return f"Error: missing required argument(s): {', '.join(missing)}"
        try:
            return await tool.run(arguments)
        except ToolError as exc:
            log.info("tool refused tool=%s reason=%s", name, exc)
            return f"Error: {exc}"
        except Exception as exc:
            log.exception("tool failed tool=%s", name)
            return f"Error: {name} failed ({type(exc).__name__})"


class WorkspaceFiles:
    """read_file, write_file, edit_file and list_dir, confined to one directory."""

    def __init__(self, workspace: Path, hidden: tuple[str, ...] = ()) -> None:
        self.root = workspace.resolve()
        # Top-level directories this instance can neither read nor write (for group chats:
        # the owner's memory and other conversations).
        self.hidden = hidden

    def resolve(self, raw: Any, *, writing: bool = False) -> Path:
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("path must be a non-empty string")
        if "\x00" in raw:
            raise ToolError("path contains a NUL character")
        candidate = Path(raw.strip()).expanduser()
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve()
        except (RuntimeError, OSError):  # a symlink loop, or a path too long
            raise ToolError(f"{raw!r} cannot be opened: a symlink loop or a broken path") from None
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise ToolError(f"{raw!r} is outside the workspace; only files under it are reachable")
        relative = resolved.relative_to(self.root)
        if relative.parts and relative.parts[0] in self.hidden:
            raise ToolError(f"{relative.parts[0]}/ is private and not available in this chat")
        if writing and relative.parts and relative.parts[0] in _READ_ONLY_DIRS:
            raise ToolError(f"{relative} is managed by memgate and cannot be written")
        return resolved

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root)) or "."

    def _read(self, arguments: dict[str, Any]) -> str:
        path = self.resolve(arguments.get("path"))
        if not path.is_file():
            raise ToolError(f"no such file: {self.relative(path)}")
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(MAX_READ_CHARS + 1)
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
        atomic_write(path, content)
        return f"Wrote {len(content)} characters to {self.relative(path)}"

    def _edit(self, arguments: dict[str, Any]) -> str:
        path = self.resolve(arguments.get("path"), writing=True)
        old, new = arguments.get("old_text"), arguments.get("new_text")
        if not isinstance(old, str) or not old or not isinstance(new, str):
            raise ToolError("old_text (non-empty) and new_text must be strings")
        if not path.is_file():
            raise ToolError(f"no such file: {self.relative(path)}")
        text = path.read_text(encoding="utf-8")
        count = text.count(old)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times; give more context"
            raise ToolError(f"old_text {where} in {self.relative(path)}")
        atomic_write(path, text.replace(old, new, 1))
        return f"Edited {self.relative(path)}"

    def _list(self, arguments: dict[str, Any]) -> str:
        path = self.resolve(arguments.get("path") or ".")
        if not path.is_dir():
            raise ToolError(f"not a directory: {self.relative(path)}")
        entries = sorted(path.iterdir(), key=lambda p: p.name)
        if path == self.root:
            entries = [e for e in entries if e.name not in self.hidden]
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
