"""Memory search, the facade: what the agent's tools (search_tools) and `memgate memory search` use.

`MemorySearch` keeps a SQLite FTS5 index of HISTORY.md, MEMORY.md, daily notes and sessions (see
search_sources, search_index) and refreshes it before every query, so what was appended a moment ago
is found: every file is looked at, or, told what this process writes (search_touched), those files
and memory/, with every file once a minute for other processes' writes. Given an `Embedder`, it also ranks by meaning: new entries are embedded as the index grows
and each query blends vector and keyword scores (search_vectors); if the embeddings endpoint fails,
that query runs on keywords alone. `get()` reads lines around a hit (search_get). It imports
neither the gateway nor an LLM SDK.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from pathlib import Path

from memory.errors import EmbeddingError
from memory.search.get import DEFAULT_LINES, read_lines
from memory.search.index import Match, Progress, RefreshStats, SearchIndex, tie_break
from memory.search.text import Query, make_snippet, parse_query
from memory.search.touched import TouchedFiles
from memory.search.vectors import BATCH, Embedder, VectorStore, blend, embed_checked, text_of

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 8
MAX_LIMIT = 20
SEARCH_BATCHES = 4  # embeddings requests a query may spend on new entries; refresh() does the rest
DEFAULT_WEIGHTS = (0.7, 0.3)  # (vector, keyword)


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
        touched: TouchedFiles | None = None,
    ) -> None:
        self.workspace = workspace
        self.tz = tz
        self.index = SearchIndex(workspace, tz, db_path, touched=touched)
        self.vectors = VectorStore(self.index.db)
        self.embedder = embedder
        self.weights = weights
        self._embedding = asyncio.Lock()  # one catch-up at a time, so no entry is embedded twice
        # For /healthz: "off" without an embedder, "idle" before its first call, then "ok" or
        # "failing" with the error, as the last call went.
        self.embeddings_state = "off" if embedder is None else "idle"
        self.embeddings_error = ""

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
            self.embeddings_state, self.embeddings_error = "failing", str(exc)
            return keyword[:limit]
        self.embeddings_state, self.embeddings_error = "ok", ""
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
            done = await self._embed_pending(self.embedder)
        except EmbeddingError as exc:
            log.warning("embeddings failed model=%s error=%s", self.embedder.model, exc)
            self.embeddings_state, self.embeddings_error = "failing", str(exc)
            return 0
        if done:
            self.embeddings_state, self.embeddings_error = "ok", ""
        return done

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
