"""Recalled memory kept out of what consolidation reads: a memory tool's result becomes a marker.

When the assistant searched or read its memory during a turn, the result sits in the session as a
tool message. Shown to the consolidation model, that text looks like something the person said,
and is filed again as a new fact: memory feeding on itself. So the transcript consolidation sees
has each recall replaced by a short marker (`[recalled from memory: 3 results]`); the session file
keeps the result as it was. A recall is a result of `memory_search` or `memory_get`, or a
`read_file` of a file under memory/ (MEMORY.md, HISTORY.md, daily notes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

from memory.sessions.file import Message

RECALL_TOOLS = frozenset({"memory_search", "memory_get"})
FILE_READ = "read_file"
MEMORY_FOLDER = "memory"
# What the consolidation prompt says of the markers (memory/consolidation/summariser.py).
RECALL_NOTE = (
    "Lines reading [recalled from memory: ...] stand for text the assistant looked up in its own "
    "memory: it is already stored, so it is not new information; never add it to memory again."
)


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    raw = call.get("function", {}).get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _under_memory(path: object) -> bool:
    """Whether a read_file path (relative to the workspace) names a file under memory/."""
    if not isinstance(path, str):
        return False
    parts = [p for p in PurePosixPath(path.strip()).parts if p not in (".", "")]
    return len(parts) >= 2 and parts[0] == MEMORY_FOLDER


def _results(content: str) -> int:
    """Hits in a memory_search result: one line each, before the closing hint."""
    return sum(1 for line in content.splitlines() if line.strip() and not line.startswith("("))


def marker(name: str, arguments: dict[str, Any], content: str) -> str:
    """What a recall is shown as."""
    if name == "memory_search":
        hits = 0 if content.startswith("No matches") else _results(content)
        return f"[recalled from memory: {hits} result{'' if hits == 1 else 's'}]"
    path = arguments.get("path")
    where = f" {path}" if isinstance(path, str) and path.strip() else ""
    return f"[recalled from memory:{where} read]"


class RecallMask:
    """Knows the tool calls of some messages, and replaces the results that were recalls."""

    def __init__(self, messages: Iterable[Message]) -> None:
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}
        for message in messages:
            for call in message.get("tool_calls") or ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    name = str(call.get("function", {}).get("name", ""))
                    self._calls[call["id"]] = (name, _arguments(call))

    def is_recall(self, message: Message) -> bool:
        if message.get("role") != "tool":
            return False
        name, arguments = self._calls.get(str(message.get("tool_call_id")), ("", {}))
        name = name or str(message.get("name", ""))
        if name in RECALL_TOOLS:
            return True
        return name == FILE_READ and _under_memory(arguments.get("path"))

    def apply(self, message: Message) -> Message:
        """`message`, or for a recall a copy whose content is the marker."""
        if not self.is_recall(message):
            return message
        name, arguments = self._calls.get(str(message.get("tool_call_id")), ("", {}))
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        return {**message, "content": marker(name or str(message.get("name")), arguments, text)}


def mask_recalls(messages: list[Message]) -> list[Message]:
    """`messages` with every recall's result replaced by its marker (calls found among them)."""
    mask = RecallMask(messages)
    return [mask.apply(message) for message in messages]
