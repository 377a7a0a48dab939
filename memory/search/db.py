"""The search index's database file (`STATE/index/memory.db`): one usable SQLite connection to it, or a fresh start.

The database only caches what the files say. Missing, corrupt (SQLITE_CORRUPT, SQLITE_NOTADB), or
made by another schema version, tokenizer or timezone, it is deleted and created empty, and the next
refresh fills it from the files; deleted or replaced while open, it is noticed (inode) and reopened.
Work runs under a lock on one connection, so callers may come from any thread.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from memory.fileio import FILE_MODE, ensure_private_dir

log = logging.getLogger(__name__)

SCHEMA_VERSION = "2"  # 2: the vectors table
TOKENIZER = "porter unicode61 remove_diacritics 2"
_CORRUPT = {11, 26}  # SQLITE_CORRUPT (and its extended codes), SQLITE_NOTADB
_SCHEMA = f"""
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files(
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    resume INTEGER NOT NULL,
    resume_line INTEGER NOT NULL,
    resume_ts REAL,
    fingerprint BLOB NOT NULL
);
CREATE TABLE entries(
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    line INTEGER NOT NULL,
    ts REAL,
    kind TEXT NOT NULL
);
CREATE INDEX entries_by_file ON entries(file_id, pos);
CREATE VIRTUAL TABLE fts USING fts5(body, tokenize='{TOKENIZER}');
CREATE TABLE vectors(id INTEGER PRIMARY KEY, model TEXT NOT NULL, vector BLOB NOT NULL);
"""

T = TypeVar("T")


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _CORRUPT


class IndexDatabase:
    """The connection to the index file, reopened or recreated as needed."""

    def __init__(self, path: Path, timezone: str) -> None:
        self.path = path
        self._meta = {"schema": SCHEMA_VERSION, "tokenizer": TOKENIZER, "timezone": timezone}
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None

    def run(self, work: Callable[[sqlite3.Connection], T], fresh: bool = False) -> T:
        """`work(conn)` under the lock; a corrupt database is recreated and `work` runs once more."""
        with self._lock:
            if fresh:
                self._discard()
            try:
                return work(self._connect())
            except sqlite3.DatabaseError as exc:
                if not _is_corrupt(exc):
                    raise
                log.warning("search index is corrupt, rebuilding path=%s error=%s", self.path, exc)
                self._discard()
                return work(self._connect())

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._identity == self._file_identity():
            return self._conn
        self._close()  # closed, or the file was deleted or replaced under us
        ensure_private_dir(self.path.parent)
        try:
            conn = self._open()
        except sqlite3.DatabaseError as exc:
            if not _is_corrupt(exc):
                raise
            log.warning("search index unreadable, rebuilding path=%s error=%s", self.path, exc)
            self._remove_files()
            conn = self._open()
        self._conn, self._identity = conn, self._file_identity()
        return conn

    def _open(self) -> sqlite3.Connection:
        conn = _connect_file(self.path)
        try:
            if self._stored_meta(conn) == self._meta:
                return conn
            conn.close()
            self._remove_files()
            conn = _connect_file(self.path)
            # executescript commits any open transaction first, so the script carries its own.
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
            with transaction(conn):
                conn.executemany("INSERT INTO meta VALUES (?, ?)", self._meta.items())
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _stored_meta(conn: sqlite3.Connection) -> dict[str, str]:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE name = 'meta'").fetchall()
        if not tables:
            return {}
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        return stat.st_dev, stat.st_ino

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn, self._identity = None, None

    def _discard(self) -> None:
        self._close()
        self._remove_files()

    def _remove_files(self) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            self._close()


def _connect_file(path: Path) -> sqlite3.Connection:
    # SQLite creates the file honouring the umask (0644), and its -wal and -shm files copy the
    # database's mode: create it owner-only first.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE))
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("PRAGMA journal_mode = WAL")  # readers never wait for a refresh
        conn.execute("PRAGMA synchronous = NORMAL")  # the files are the truth; the index can lag
        conn.execute("PRAGMA journal_size_limit = 4194304")  # a rebuild's WAL does not linger
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise
    conn.execute("COMMIT")
