"""The agent's memory tools, memory_search and memory_get: their schemas, prompt text and runs.

Plain data for the gateway's tool registry, so this package imports no gateway module.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from memory.errors import SearchPathError
from memory.search.display import format_hits
from memory.search.get import DEFAULT_LINES, MAX_LINES
from memory.search.searcher import DEFAULT_LIMIT, MAX_LIMIT, MemorySearch

SEARCH_PROMPT = """\
## Searching memory
memory_search finds what was recorded or said before: HISTORY.md summaries, MEMORY.md, daily notes \
and the messages of past conversations, by keywords in any language (English, 中文, 日本語). Use it \
when the person refers to something from earlier (a name, a place, "like last time") and before \
saying you do not know or remember. Each hit shows file:line, date and a snippet; call memory_get \
with that path and from_line to read the lines around it before relying on it."""


ToolRun = Callable[[dict[str, Any]], Awaitable[str]]
ToolSpec = tuple[str, str, dict[str, Any], ToolRun]


def _number(value: object, default: int, low: int, high: int) -> int:
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return default
    return max(low, min(value, high))


def search_tools(search: MemorySearch) -> list[ToolSpec]:
    """memory_search and memory_get as (name, description, JSON schema, run) for the tool registry."""

    async def memory_search(arguments: dict[str, Any]) -> str:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return "Error: query must be a non-empty string"
        limit = _number(arguments.get("limit"), DEFAULT_LIMIT, 1, MAX_LIMIT)
        hits = await search.search(query, limit)
        if not hits:
            return f"No matches for {query.strip()!r} in memory or past conversations."
        return f"{format_hits(hits)}\n(read around a hit with memory_get(path, from_line))"

    async def memory_get(arguments: dict[str, Any]) -> str:
        from_line = _number(arguments.get("from_line"), 1, 1, 10**9)
        lines = _number(arguments.get("lines"), DEFAULT_LINES, 1, MAX_LINES)
        try:
            return await search.get(str(arguments.get("path") or ""), from_line, lines)
        except SearchPathError as exc:
            return f"Error: {exc}"

    search_schema = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Keywords, e.g. 'dentist appointment' or '咖啡'. Words in double "
                "quotes must appear together; a trailing * matches a prefix.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LIMIT,
                "description": f"Most hits to return (default {DEFAULT_LIMIT}).",
            },
        },
        "required": ["query"],
    }
    get_schema = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "A file under memory/ or sessions/, as memory_search shows it.",
            },
            "from_line": {
                "type": "integer",
                "minimum": 1,
                "description": "First line (default 1).",
            },
            "lines": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LINES,
                "description": f"How many lines (default {DEFAULT_LINES}).",
            },
        },
        "required": ["path"],
    }
    return [
        (
            "memory_search",
            "Search long-term memory and past conversations (HISTORY.md, MEMORY.md, daily notes, "
            "every live and archived session) by keywords, in English, Chinese or any language. "
            "Entries with all the words; if none, entries with any. Returns path:line, date, kind and a snippet.",
            search_schema,
            memory_search,
        ),
        (
            "memory_get",
            "Read numbered lines of a file under memory/ or sessions/, e.g. around a memory_search "
            "hit. Session files are shown one message per line as [date] role: text.",
            get_schema,
            memory_get,
        ),
    ]
