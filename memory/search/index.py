"""The contents of the memory search index: refreshing it from the files, querying it with FTS5.

Each refresh compares the files with what was indexed (size, mtime, inode, and a fingerprint of the
bytes before the resume point): an append is parsed from where the last parse stopped, anything else
reindexes that file, and files that are gone are dropped. Each file commits on its own, so an
interrupted refresh leaves consistent rows. Given the files this process writes (search_touched),
the refresh before a search looks only at those and at memory/, and at every file once a minute.
Methods are synchronous; `MemorySearch` runs them in worker threads.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any

from memory.search.db import IndexDatabase, transaction
from memory.search.sources import Cursor, Source, parse, scan, scan_files
from memory.search.text import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN, Query, segment
from memory.search.touched import TouchedFiles

log = logging.getLogger(__name__)

_FINGERPRINT_SPAN = 1024
# Matches of one query ranked at most: a word found in more entries is ranked among the last
# indexed of them, so a query costs the same after a year as after a week (ranking all of a
# common word's 800,000 entries took seconds).
RANK_WINDOW = 5_000
_FILE_COLUMNS = "id, size, mtime_ns, ino, resume, resume_line, resume_ts, fingerprint"

Progress = Callable[[int, int], None]
"""Called as progress(bytes_done, bytes_total) while files are indexed, from a worker thread."""


@dataclass(frozen=True)
class Match:
    """One indexed entry that matched, before formatting."""

    id: int  # the entry's row id, shared by entries, fts and vectors
    path: str
    line: int
    ts: float | None
    kind: str
    score: float  # -bm25 (blended with vector similarity by MemorySearch): higher is better
    highlighted: str


@dataclass
class RefreshStats:
    files: int = 0  # files (re)indexed
    added: int = 0  # entries written
    removed: int = 0  # entries dropped
    embedded: int = 0  # entries given a vector (MemorySearch with an embedder)


@dataclass(frozen=True)
class _Indexed:
    id: int
    size: int
    mtime_ns: int
    ino: int
    cursor: Cursor
    fingerprint: bytes

    def unchanged(self, stat: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ino) == (stat.st_size, stat.st_mtime_ns, stat.st_ino)


class SearchIndex:
    """The index of one workspace: refresh from the files, query with FTS5."""

    def __init__(
        self,
        workspace: Path,
        tz: tzinfo,
        db_path: Path | None = None,
        rank_window: int = RANK_WINDOW,
        touched: TouchedFiles | None = None,
    ) -> None:
        self.workspace = workspace
        self.tz = tz
        self.db = IndexDatabase(db_path or workspace / ".index" / "memory.db", str(tz))
        self.rank_window = rank_window
        # What this process writes; without it, every refresh looks at every file.
        self.touched = touched
        # The files table as of the last refresh, and the connection and data_version it was
        # read at: another process's commit (or a reopened file) makes it read again.
        self._known: dict[str, tuple[int, int, int]] = {}
        self._known_at: tuple[sqlite3.Connection, int] | None = None

    # -- public ------------------------------------------------------------------------------------
    def refresh(self, progress: Progress | None = None, *, full: bool = True) -> RefreshStats:
        """Index what changed in every file; with `full=False`, as the refresh before a search."""
        return self.db.run(lambda conn: self._refresh(conn, progress, full))

    def rebuild(self, progress: Progress | None = None) -> RefreshStats:
        def work(conn: sqlite3.Connection) -> RefreshStats:
            stats = self._refresh(conn, progress, True)
            conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")  # one b-tree: faster queries
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return stats

        return self.db.run(work, fresh=True)

    def search(self, query: Query, limit: int, refresh: bool = True) -> list[Match]:
        """Entries that have every word; if none has, entries that have any of them."""

        def work(conn: sqlite3.Connection) -> list[Match]:
            if refresh:
                self._refresh(conn, None, False)
            pool = max(3 * limit, 20)  # enough candidates for the recency tie-break
            found = self._match(conn, query.strict, pool)
            if not found and query.loose:
                found = self._match(conn, query.loose, pool)
            return tie_break(found)[:limit]

        return self.db.run(work)

    def describe(self, ids: list[int]) -> list[Match]:
        """The entries with these ids as unhighlighted matches (score 0), for vector-only hits."""

        def work(conn: sqlite3.Connection) -> list[Match]:
            marks = ",".join("?" * len(ids))
            rows = conn.execute(
                "SELECT e.id, f.path, e.line, e.ts, e.kind, fts.body FROM entries e"
                " JOIN files f ON f.id = e.file_id JOIN fts ON fts.rowid = e.id"
                f" WHERE e.id IN ({marks})",
                ids,
            )
            return [
                Match(i, path, line, ts, kind, 0.0, body) for i, path, line, ts, kind, body in rows
            ]

        return self.db.run(work) if ids else []

    def stats(self) -> tuple[int, int]:
        """(entries, files) currently indexed."""

        def work(conn: sqlite3.Connection) -> tuple[int, int]:
            entries = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
            return entries, conn.execute("SELECT count(*) FROM files").fetchone()[0]

        return self.db.run(work)

    def close(self) -> None:
        self.db.close()

    # -- indexing ----------------------------------------------------------------------------------
    def _refresh(
        self, conn: sqlite3.Connection, progress: Progress | None, full: bool
    ) -> RefreshStats:
        # This runs before every search: compare plain tuples kept from the last refresh, read
        # full rows only for changes.
        reopened = self._known_at is None or self._known_at[0] is not conn
        known = self._known_files(conn)
        written = None if self.touched is None else self.touched.take(full or reopened)
        try:
            return self._update(conn, progress, known, written)
        except BaseException:  # a refresh cut short (a stop, a database error): the next does it
            if self.touched is not None:
                self.touched.give_back(written)
            raise

    def _update(
        self,
        conn: sqlite3.Connection,
        progress: Progress | None,
        known: dict[str, tuple[int, int, int]],
        written: set[Path] | None,
    ) -> RefreshStats:
        current, indexed = self._look(conn, known, written)
        changed = [
            (Source(path, absolute, kind), stat)
            for path, (absolute, kind, stat) in current.items()
            if known.get(path) != (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        ]
        stats = RefreshStats()
        gone = [path for path in indexed if path not in current]
        if not changed and not gone:
            return stats
        for path in gone:
            with transaction(conn):
                stats.removed += self._forget(conn, path)
            known.pop(path, None)
        total, done = sum(stat.st_size for _, stat in changed), 0
        for source, stat in changed:
            try:
                with transaction(conn):
                    self._index_file(conn, source, stat, stats)
                known[source.relative] = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
            except OSError as exc:  # vanished or unreadable since the scan: next refresh sees it
                known.pop(source.relative, None)
                if self.touched is not None:
                    self.touched.add(self.workspace / source.relative)
                log.warning("cannot index file=%s error=%s", source.relative, exc)
            done += stat.st_size
            if progress is not None:
                progress(done, total)
        return stats

    def _look(
        self,
        conn: sqlite3.Connection,
        known: dict[str, tuple[int, int, int]],
        written: set[Path] | None,
    ) -> tuple[dict[str, tuple[str, str, os.stat_result]], Iterable[str]]:
        """The files to compare with the index now, and the indexed paths they cover (one missing
        from the files is gone): every file, or, given the files `written` since the last
        refresh, those and memory/'s (a handful, and the person may edit them by hand), whose
        indexed paths are read through the path's index, not from every row."""
        looked_at = None if written is None else _relative(self.workspace, written)
        if looked_at is None:
            return scan(self.workspace), known
        current = scan(self.workspace, ("memory",)) | scan_files(self.workspace, looked_at)
        # '0' follows '/': the range holds every path that starts with memory/.
        rows = conn.execute("SELECT path FROM files WHERE path >= 'memory/' AND path < 'memory0'")
        return current, [row[0] for row in rows] + [path for path in looked_at if path in known]

    def _known_files(self, conn: sqlite3.Connection) -> dict[str, tuple[int, int, int]]:
        """Path to (size, mtime_ns, ino) of every indexed file, read from the database only when
        it may have changed under the copy kept (data_version moves with other connections'
        commits, never with this one's, which keep the copy up to date themselves)."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if self._known_at is None or self._known_at[0] is not conn or self._known_at[1] != version:
            rows = conn.execute("SELECT path, size, mtime_ns, ino FROM files")
            self._known = {row[0]: row[1:] for row in rows}
            self._known_at = (conn, version)
        return self._known

    def _forget(self, conn: sqlite3.Connection, path: str) -> int:
        row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            return 0
        removed = self._drop_entries(conn, row[0], 0)
        conn.execute("DELETE FROM files WHERE id = ?", (row[0],))
        return removed

    def _index_file(
        self, conn: sqlite3.Connection, source: Source, stat: os.stat_result, stats: RefreshStats
    ) -> None:
        found = conn.execute(
            f"SELECT {_FILE_COLUMNS} FROM files WHERE path = ?", (source.relative,)
        ).fetchone()
        indexed = _row(found) if found else None
        if indexed is not None and indexed.unchanged(stat):
            return  # another process got here first
        start = Cursor()
        if (
            indexed is not None
            and source.appendable
            and indexed.ino == stat.st_ino
            and stat.st_size >= indexed.cursor.offset
            and _fingerprint(source.path, indexed.cursor.offset) == indexed.fingerprint
        ):
            start = indexed.cursor
        if indexed is None:
            file_id = conn.execute(
                "INSERT INTO files(path, size, mtime_ns, ino, resume, resume_line, fingerprint)"
                " VALUES (?, -1, -1, -1, 0, 1, x'')",
                (source.relative,),
            ).lastrowid
        else:
            file_id = indexed.id
            stats.removed += self._drop_entries(conn, file_id, start.offset)
        with open(source.path, "rb") as handle:
            handle.seek(start.offset)
            data = handle.read()
        entries, cursor = parse(source, data, start, self.tz, stat.st_mtime)
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM entries").fetchone()[0]
        conn.executemany(
            "INSERT INTO entries(id, file_id, pos, line, ts, kind) VALUES (?, ?, ?, ?, ?, ?)",
            [(first + i, file_id, e.offset, e.line, e.ts, e.kind) for i, e in enumerate(entries)],
        )
        conn.executemany(
            "INSERT INTO fts(rowid, body) VALUES (?, ?)",
            [(first + i, segment(e.text)) for i, e in enumerate(entries)],
        )
        conn.execute(
            "UPDATE files SET size = ?, mtime_ns = ?, ino = ?, resume = ?, resume_line = ?,"
            " resume_ts = ?, fingerprint = ? WHERE id = ?",
            (
                stat.st_size,
                stat.st_mtime_ns,
                stat.st_ino,
                cursor.offset,
                cursor.line,
                cursor.ts,
                _fingerprint(source.path, cursor.offset),
                file_id,
            ),
        )
        stats.files += 1
        stats.added += len(entries)

    @staticmethod
    def _drop_entries(conn: sqlite3.Connection, file_id: int, offset: int) -> int:
        where = "file_id = ? AND pos >= ?"
        # Row ids are reused by later entries, so an entry's vector goes with it.
        conn.execute(
            f"DELETE FROM vectors WHERE id IN (SELECT id FROM entries WHERE {where})",
            (file_id, offset),
        )
        conn.execute(
            f"DELETE FROM fts WHERE rowid IN (SELECT id FROM entries WHERE {where})",
            (file_id, offset),
        )
        return conn.execute(f"DELETE FROM entries WHERE {where}", (file_id, offset)).rowcount

    # -- querying ----------------------------------------------------------------------------------
    def _match(self, conn: sqlite3.Connection, expression: str, limit: int) -> list[Match]:
        try:
            # The last indexed window of matches, newest first: FTS5 walks a word's entries from
            # the end and stops there, where ORDER BY rank, even above a rowid floor, walked all
            # of them. bm25's weight of each word still counts the word's entries: the one cost
            # here that grows with the index (about 50 ms for a word in 600,000 of a million).
            window = conn.execute(
                "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT ?",
                (expression, self.rank_window),
            ).fetchall()
            best = heapq.nsmallest(limit, window, key=lambda row: (row[1], -row[0]))
            # highlight() for the best alone: the same walk, down to the oldest of them, with
            # the others filtered out before their text is read (`+rowid`: given to FTS5, the
            # IN list would run the whole query once per id).
            marks = ",".join("?" * len(best))
            shown = dict(
                conn.execute(
                    "SELECT rowid, highlight(fts, 0, ?, ?) FROM fts WHERE fts MATCH ?"
                    f" AND rowid >= ? AND +rowid IN ({marks}) ORDER BY rowid DESC",
                    (
                        HIGHLIGHT_OPEN,
                        HIGHLIGHT_CLOSE,
                        expression,
                        min((rowid for rowid, _ in best), default=0),
                        *(rowid for rowid, _ in best),
                    ),
                ).fetchall()
            )
        except sqlite3.OperationalError as exc:
            if "fts5" not in str(exc):
                raise
            log.warning("search query rejected query=%r error=%s", expression, exc)
            return []
        ranked = [(rowid, rank, shown[rowid]) for rowid, rank in best if rowid in shown]
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        details = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT e.id, f.path, e.line, e.ts, e.kind FROM entries e"
                f" JOIN files f ON f.id = e.file_id WHERE e.id IN ({marks})",
                [rowid for rowid, _, _ in ranked],
            )
        }
        matches = []
        for rowid, rank, text in ranked:
            if rowid in details:
                path, line, ts, kind = details[rowid]
                matches.append(Match(rowid, path, line, ts, kind, -rank, text))
        return matches


def _row(values: tuple[Any, ...]) -> _Indexed:
    file_id, size, mtime_ns, ino, resume, resume_line, resume_ts, fingerprint = values
    return _Indexed(
        file_id, size, mtime_ns, ino, Cursor(resume, resume_line, resume_ts), bytes(fingerprint)
    )


def _relative(workspace: Path, paths: set[Path]) -> set[str] | None:
    """`paths` as the index names them; None if one is not under `workspace` as spelt here."""
    try:
        return {path.relative_to(workspace).as_posix() for path in paths}
    except ValueError:
        return None


def tie_break(matches: list[Match]) -> list[Match]:
    """Score order; scores equal to three significant digits go newest first."""
    return sorted(matches, key=lambda m: (-float(f"{m.score:.3g}"), -(m.ts or 0.0)))


def _fingerprint(path: str, upto: int) -> bytes:
    """A digest of the first and the last KiB before `upto`: an append leaves it unchanged."""
    with open(path, "rb") as handle:
        head = handle.read(min(upto, _FINGERPRINT_SPAN))
        handle.seek(max(0, upto - _FINGERPRINT_SPAN))
        tail = handle.read(upto - max(0, upto - _FINGERPRINT_SPAN))
    return hashlib.sha1(b"%d\0%s\0%s" % (upto, head, tail), usedforsecurity=False).digest()
