"""Semantic memory search: the `Embedder` seam and the entry vectors kept in the index database.

Each entry gets one vector, a float32 BLOB in the `vectors` table with the name of the model that
made it, so naming another model re-embeds everything on the next refresh. Vectors are scaled to
length 1 when stored, so cosine similarity is a dot product. Scoring reads every stored vector and
multiplies in pure Python: linear in entries × dimensions, fine for a personal workspace (README,
"Search", has the figures). This module imports no SDK; the gateway supplies the `Embedder`.
"""

from __future__ import annotations

import heapq
import math
import operator
import sqlite3
from array import array
from collections.abc import Collection, Sequence
from typing import Protocol

from memory.errors import EmbeddingError
from memory.search.db import IndexDatabase, transaction
from memory.search.text import unsegment

BATCH = 64  # texts per embeddings request
MAX_TEXT_CHARS = 4_000  # well inside the ~8k-token input limit of common embedding models


class Embedder(Protocol):
    """Turns texts into vectors, e.g. through an OpenAI-compatible embeddings endpoint."""

    model: str

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; raises EmbeddingError when the endpoint fails."""
        ...


async def embed_checked(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    """`embedder.embed(texts)`, with an answer of the wrong shape turned into EmbeddingError."""
    vectors = await embedder.embed(texts)
    if len(vectors) != len(texts) or not all(vectors):
        raise EmbeddingError(f"asked for {len(texts)} vectors, got {len(vectors)} (or empty ones)")
    return vectors


def unit(values: Sequence[float]) -> array[float]:
    """`values` as float32, scaled to length 1; a zero vector stays zero."""
    vector = array("f", values)
    norm = math.hypot(*vector)
    return array("f", (x / norm for x in vector)) if norm > 0 else vector


def blend(
    keyword: dict[int, float], vector: dict[int, float], weights: tuple[float, float]
) -> dict[int, float]:
    """wv × cosine (0 if negative) + wk × BM25 scaled to 0..1 by the best, for every candidate."""
    wv, wk = weights
    best = max(keyword.values(), default=0.0)
    return {
        entry: wv * max(0.0, vector.get(entry, 0.0))
        + wk * (keyword.get(entry, 0.0) / best if best > 0 else 0.0)
        for entry in keyword.keys() | vector.keys()
    }


class VectorStore:
    """The `vectors` table: which entries still need a vector, storing them, scoring a query."""

    def __init__(self, db: IndexDatabase) -> None:
        self.db = db

    def pending(self, model: str, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` entries with no vector from `model`, newest first, as (id, indexed body)."""

        def work(conn: sqlite3.Connection) -> list[tuple[int, str]]:
            return conn.execute(
                "SELECT e.id, fts.body FROM entries e JOIN fts ON fts.rowid = e.id"
                " WHERE NOT EXISTS (SELECT 1 FROM vectors v WHERE v.id = e.id AND v.model = ?)"
                " ORDER BY e.id DESC LIMIT ?",
                (model, limit),
            ).fetchall()

        return self.db.run(work)

    def store(self, model: str, rows: list[tuple[int, str]], vectors: list[list[float]]) -> None:
        """Keep each row's vector, unless a refresh replaced the entry in the meantime."""

        def work(conn: sqlite3.Connection) -> None:
            # Row ids are reused, so the body must still be the one that was embedded.
            with transaction(conn):
                conn.executemany(
                    "INSERT OR REPLACE INTO vectors(id, model, vector) SELECT ?, ?, ?"
                    " WHERE EXISTS (SELECT 1 FROM fts WHERE rowid = ? AND body = ?)",
                    [
                        (entry, model, unit(vector).tobytes(), entry, body)
                        for (entry, body), vector in zip(rows, vectors, strict=True)
                    ],
                )

        self.db.run(work)

    def similarities(
        self, model: str, query: Sequence[float], top: int, include: Collection[int]
    ) -> dict[int, float]:
        """Cosine similarity to `query` of the `top` closest entries and of those in `include`."""
        probe = unit(query)

        def work(conn: sqlite3.Connection) -> dict[int, float]:
            scores: dict[int, float] = {}
            rows = conn.execute("SELECT id, vector FROM vectors WHERE model = ?", (model,))
            for entry, blob in rows:
                vector = array("f")
                vector.frombytes(blob)
                if len(vector) == len(probe):
                    scores[entry] = sum(map(operator.mul, probe, vector))
            return scores

        scores = self.db.run(work)
        best = heapq.nlargest(top, scores, key=scores.__getitem__)
        return {entry: scores[entry] for entry in (*best, *include) if entry in scores}


def text_of(body: str) -> str:
    """What is sent to the embeddings endpoint for an indexed body: the text as written, capped."""
    return unsegment(body)[:MAX_TEXT_CHARS].strip() or "(empty)"
