"""Memory search: what the agent's memory_search and memory_get tools and `memgate memory search` use.

`MemorySearch` keeps a SQLite FTS5 index of HISTORY.md, MEMORY.md, daily notes and sessions (see
search_sources, search_index) and refreshes it before every query, so what was appended a moment ago
is found. Given an `Embedder`, it also ranks by meaning: new entries are embedded as the index grows
and each query blends vector and keyword scores (search_vectors); if the embeddings endpoint fails,
that query runs on keywords alone. It imports neither the gateway nor an LLM SDK: the tools are
plain data for the gateway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from itertools import islice
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from memory.errors import EmbeddingError, SearchPathError
from memory.search_index import Match, Progress, RefreshStats, SearchIndex, tie_break
from memory.search_sources import is_inside, roots
from memory.search_text import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, Query, make_snippet, parse_query
from memory.search_vectors import BATCH, Embedder, VectorStore, blend, embed_checked, text_of

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 8
MAX_LIMIT = 20
DEFAULT_LINES = 40
MAX_LINES = 200
MAX_GET_CHARS = 12_000
MAX_LINE_CHARS = 2_000
TOOL_RESULT_CHARS = 300
SEARCH_BATCHES = 4  # embeddings requests a query may spend on new entries; refresh() does the rest
DEFAULT_WEIGHTS = (0.7, 0.3)  # (vector, keyword)

SEARCH_PROMPT = """\
## Searching memory
memory_search finds what was recorded or said before: HISTORY.md summaries, MEMORY.md, daily notes \
and the messages of past conversations, by keywords in any language (English, 中文, 日本語). Use it \
when the person refers to something from earlier (a name, a place, "like last time") and before \
saying you do not know or remember. Each hit shows file:line, date and a snippet; call memory_get \
with that path and from_line to read the lines around it before relying on it."""


@dataclass(frozen=True)
class Hit:
    """One search result; `snippet` is a single line with the matches between « and »."""

    path: str  # relative to the workspace, e.g. memory/HISTORY.md
    line: int  # 1-based line where the entry starts
    date: str  # YYYY-MM-DD HH:MM (YYYY-MM-DD for notes and MEMORY.md), "" if unknown
    kind: str  # history, memory, note, user or assistant
    score: float  # -bm25, or the blended score with embeddings; higher is better
    snippet: str


class MemorySearch:
    """Search over one workspace's memory and sessions; sqlite work runs in worker threads."""

    def __init__(
        self,
        workspace: Path,
        tz: tzinfo,
        *,
        db_path: Path | None = None,
        embedder: Embedder | None = None,
        weights: tuple[float, float] = DEFAULT_WEIGHTS,
    ) -> None:
        self.workspace = workspace
        self.tz = tz
        self.index = SearchIndex(workspace, tz, db_path)
        self.vectors = VectorStore(self.index.db)
        self.embedder = embedder
        self.weights = weights
        self._embedding = asyncio.Lock()  # one catch-up at a time, so no entry is embedded twice

    async def search(self, query: str, limit: int = DEFAULT_LIMIT) -> list[Hit]:
        """Best hits for `query`, after indexing whatever the files gained since the last call."""
        parsed = parse_query(query)
        if parsed is None:
            return []
        limit = max(1, min(limit, MAX_LIMIT))
        if self.embedder is None:
            matches = await asyncio.to_thread(self.index.search, parsed, limit)
        else:
            matches = await self._blended(self.embedder, query.strip(), parsed, limit)
        return [self._hit(match) for match in matches]

    async def refresh(self, progress: Progress | None = None) -> RefreshStats:
        """Bring the index up to date with the files (everything, if the index was missing)."""
        stats = await asyncio.to_thread(self.index.refresh, progress)
        stats.embedded = await self._catch_up()
        return stats

    async def rebuild(self, progress: Progress | None = None) -> RefreshStats:
        """Throw the index away and build it again from the files (vectors included)."""
        stats = await asyncio.to_thread(self.index.rebuild, progress)
        stats.embedded = await self._catch_up()
        return stats

    async def get(self, path: str, from_line: int = 1, lines: int = DEFAULT_LINES) -> str:
        """`lines` lines of a file under memory/ or sessions/ from `from_line`, numbered."""
        return await asyncio.to_thread(read_lines, self.workspace, path, from_line, lines, self.tz)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.index.close)

    # -- semantic search ---------------------------------------------------------------------------
    async def _blended(
        self, embedder: Embedder, query: str, parsed: Query, limit: int
    ) -> list[Match]:
        """The top `pool` of keywords and of vectors, merged by blended score; keywords if the
        embeddings endpoint fails."""
        pool = max(3 * limit, 20)
        keyword = await asyncio.to_thread(self.index.search, parsed, pool)
        try:
            await self._embed_pending(embedder, SEARCH_BATCHES)
            (probe,) = await embed_checked(embedder, [query])
        except EmbeddingError as exc:
            log.warning("embeddings failed, keywords only model=%s error=%s", embedder.model, exc)
            return keyword[:limit]
        found = {match.id: match for match in keyword}
        similar = await asyncio.to_thread(
            self.vectors.similarities, embedder.model, probe, pool, list(found)
        )
        scores = blend({m.id: m.score for m in keyword}, similar, self.weights)
        others = [entry for entry, score in scores.items() if score > 0 and entry not in found]
        for match in await asyncio.to_thread(self.index.describe, others):
            found[match.id] = match
        blended = [replace(m, score=scores[m.id]) for m in found.values() if scores[m.id] > 0]
        return tie_break(blended)[:limit]

    async def _catch_up(self) -> int:
        """Embed every entry that has no vector yet; a failing endpoint is logged, not raised."""
        if self.embedder is None:
            return 0
        try:
            return await self._embed_pending(self.embedder)
        except EmbeddingError as exc:
            log.warning("embeddings failed model=%s error=%s", self.embedder.model, exc)
            return 0

    async def _embed_pending(self, embedder: Embedder, batches: int | None = None) -> int:
        """Embed entries without a vector from the embedder's model, newest first, BATCH at a time."""
        done = 0
        async with self._embedding:
            while batches is None or done < batches * BATCH:
                rows = await asyncio.to_thread(self.vectors.pending, embedder.model, BATCH)
                if not rows:
                    break
                vectors = await embed_checked(embedder, [text_of(body) for _, body in rows])
                await asyncio.to_thread(self.vectors.store, embedder.model, rows, vectors)
                done += len(rows)
        return done

    def _hit(self, match: Match) -> Hit:
        date = ""
        if match.ts is not None:
            moment = datetime.fromtimestamp(match.ts, self.tz)
            wide = match.kind not in ("note", "memory")
            date = moment.strftime("%Y-%m-%d %H:%M" if wide else "%Y-%m-%d")
        return Hit(
            match.path, match.line, date, match.kind, match.score, make_snippet(match.highlighted)
        )


# -- memory_get ------------------------------------------------------------------------------------
def resolve_path(workspace: Path, raw: object) -> Path:
    """A workspace-relative path to a file under memory/ or sessions/, symlinks followed; else raise."""
    if not isinstance(raw, str) or not raw.strip():
        raise SearchPathError("path must be a non-empty string, e.g. memory/HISTORY.md")
    text = raw.strip()
    relative = PurePosixPath(text.replace("\\", "/"))
    if "\x00" in text or relative.is_absolute() or text.startswith("~"):
        raise SearchPathError(
            f"{text!r}: give the path relative to the workspace, as search shows it"
        )
    if ".." in relative.parts:
        raise SearchPathError(f"{text!r}: '..' is not allowed")
    try:
        resolved = (workspace / relative).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise SearchPathError(f"{text!r} cannot be resolved ({exc})") from exc
    if not is_inside(resolved, roots(workspace)):
        raise SearchPathError(f"{text!r} is outside memory/ and sessions/")
    if not resolved.is_file():
        raise SearchPathError(f"no such file: {text}")
    return resolved


def read_lines(workspace: Path, raw: object, from_line: int, count: int, tz: tzinfo) -> str:
    """Numbered lines of a memory or session file; session lines are shown as `[date] role: text`."""
    path = resolve_path(workspace, raw)
    shown_as = str(raw).strip()
    from_line, count = max(1, from_line), max(1, min(count, MAX_LINES))
    session = path.suffix == ".jsonl"
    out: list[str] = []
    size = 0
    last = from_line - 1
    more = False
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        window = islice(handle, from_line - 1, from_line - 1 + count)
        for number, raw_line in enumerate(window, start=from_line):
            text = raw_line.rstrip("\r\n")
            text = render_session_line(text, tz) if session else text
            if len(text) > MAX_LINE_CHARS:
                text = f"{text[:MAX_LINE_CHARS]}… [{len(text) - MAX_LINE_CHARS} more characters]"
            if out and size + len(text) > MAX_GET_CHARS:
                more = True
                break
            out.append(f"{number}: {text}")
            size += len(text)
            last = number
        if not more and last == from_line - 1 + count:
            more = handle.readline() != ""
    if not out:
        return f"{shown_as} has fewer than {from_line} lines."
    header = f"{shown_as} lines {from_line}-{last}"
    if more:
        header += f" (more below: from_line={last + 1})"
    return header + "\n" + "\n".join(out)


def render_session_line(text: str, tz: tzinfo) -> str:
    """A JSONL session line as a person would read it."""
    try:
        record = json.loads(text)
    except ValueError:
        return text
    if not isinstance(record, dict):
        return text
    kind = record.get("_type")
    if kind == "metadata":
        return f"(session {record.get('key', '?')}, started {record.get('created_at', '?')})"
    if kind == "consolidated":
        return (
            f"(the first {record.get('last_consolidated')} messages are consolidated into memory)"
        )
    stamp = ""
    if isinstance(record.get("timestamp"), str):
        try:
            moment = datetime.fromisoformat(record["timestamp"])
            moment = moment.astimezone(tz) if moment.tzinfo else moment
            stamp = moment.strftime("[%Y-%m-%d %H:%M] ")
        except ValueError:
            pass
    role = record.get("role", "?")
    content = record.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    content = content if isinstance(content, str) else ""
    if role == "tool":
        short = content[:TOOL_RESULT_CHARS] + ("…" if len(content) > TOOL_RESULT_CHARS else "")
        return f"{stamp}tool result ({record.get('name', '?')}): {short}"
    calls = record.get("tool_calls") or []
    names = [c.get("function", {}).get("name", "?") for c in calls if isinstance(c, dict)]
    if names and not content.strip():
        return f"{stamp}{role} called {', '.join(names)}"
    return f"{stamp}{role}: {content}"


# -- presentation ----------------------------------------------------------------------------------
def format_hits(hits: list[Hit], *, color: bool = False) -> str:
    """One line per hit, `path:line  date  kind  snippet`; `color` bolds the matches (ANSI)."""
    lines = []
    for hit in hits:
        snippet = hit.snippet
        if color:
            snippet = snippet.replace(HIGHLIGHT_OPEN, "\x1b[1;33m").replace(
                HIGHLIGHT_CLOSE, "\x1b[0m"
            )
        date = hit.date or "-"
        lines.append(f"{hit.path}:{hit.line}  {date}  {hit.kind}  {snippet}")
    return "\n".join(lines)


def terminal_progress(stream: TextIO, width: int = 30) -> Progress:
    """A progress bar for `rebuild()`/`refresh()` on a terminal (called from a worker thread)."""
    shown = [-1]

    def show(done: int, total: int) -> None:
        filled = width * done // max(total, 1)
        if filled == shown[0] and done < total:
            return
        shown[0] = filled
        bar = "#" * filled + "." * (width - filled)
        stream.write(f"\rindexing memory [{bar}] {done / 1e6:.1f}/{total / 1e6:.1f} MB")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


# -- agent tools -----------------------------------------------------------------------------------
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
