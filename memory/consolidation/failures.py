"""Consolidation failures per session: counts, exponential backoff, and a report file for status.

The consolidator records every failure in its write path here; a session with failures waits out a
capped, jittered backoff before its next attempt. A session whose chunk went to HISTORY.md raw
after repeated failures is remembered as such until its next consolidation through the model
succeeds. With a `path`, both are also written to a small JSON file (through memory.fileio) so
`memgate status`, another process, can show them; raw endings are read back from it at start, so
a restart (or the end of `memgate memory consolidate`) does not hide them.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memory.fileio import atomic_write

log = logging.getLogger(__name__)

FAILURE_REPORT = "consolidation-failures.json"  # its name in the state folder


@dataclass
class Failing:
    """One session's run of failures since its last success."""

    failures: int
    retry_at: float  # on the consolidator's clock
    error: str


@dataclass
class RawEnding:
    """One session's chunks written raw since its last consolidation through the model."""

    chunks: int
    messages: int
    at: float  # wall clock, for people
    error: str  # the last failure before the raw copy


class FailureLog:
    """Failure counts and backoff deadlines by session key."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.total = 0
        self._sessions: dict[str, Failing] = {}
        self._raw = _raw_endings(read_raw_endings(path)) if path is not None else {}

    def record(self, key: str, error: str, now: float, *, first: float, cap: float) -> float:
        """Count a failure of `key`; return the delay before its next attempt.

        The delay is `first` after one failure, doubling with each further one up to `cap`,
        with ±20% jitter so sessions that failed together do not retry together.
        """
        failures = self.count(key) + 1
        delay = min(cap, first * 2.0 ** (failures - 1))
        delay *= random.uniform(0.8, 1.2)
        self._sessions[key] = Failing(failures, now + delay, error)
        self.total += 1
        # Small and only on failure or recovery, so written in place rather than off the loop.
        self._save(now)
        return delay

    def clear(self, key: str, now: float) -> None:
        """`key` consolidated through the model: its count, backoff and raw endings start over."""
        failed = self._sessions.pop(key, None) is not None
        if self._raw.pop(key, None) is not None or failed:
            self._save(now)

    def record_raw(self, key: str, messages: int, now: float) -> None:
        """`key`'s chunk of `messages` went to HISTORY.md raw: its count and backoff start over,
        and the raw ending is kept, with the failure that led to it, for status."""
        failing = self._sessions.pop(key, None)
        earlier = self._raw.get(key)
        self._raw[key] = RawEnding(
            chunks=(earlier.chunks if earlier else 0) + 1,
            messages=(earlier.messages if earlier else 0) + messages,
            at=time.time(),
            error=failing.error if failing else "",
        )
        self._save(now)

    def count(self, key: str) -> int:
        failing = self._sessions.get(key)
        return failing.failures if failing else 0

    def retry_at(self, key: str) -> float:
        """When `key` may be tried again (on the consolidator's clock); 0 if it is not failing."""
        failing = self._sessions.get(key)
        return failing.retry_at if failing else 0.0

    def backing_off(self, key: str, now: float) -> bool:
        failing = self._sessions.get(key)
        return failing is not None and now < failing.retry_at

    def waiting(self, now: float) -> int:
        """Sessions still inside their backoff."""
        return sum(1 for failing in self._sessions.values() if now < failing.retry_at)

    def _save(self, now: float) -> None:
        if self.path is None:
            return
        wall = time.time()
        report = {
            key: {
                "failures": failing.failures,
                "retry_in_seconds": max(0.0, round(failing.retry_at - now, 1)),
                "at": wall,
                "error": failing.error[:300],
            }
            for key, failing in self._sessions.items()
        }
        raw = {key: asdict(ending) for key, ending in self._raw.items()}
        try:
            atomic_write(self.path, json.dumps({"failing": report, "raw": raw}, ensure_ascii=False))
        except OSError as exc:  # the report is a courtesy; the disk may be what is failing
            log.debug(
                "cannot write the consolidation failure report path=%s error=%s", self.path, exc
            )


def read_failure_report(path: Path) -> dict[str, dict[str, Any]]:
    """The failing sessions a running gateway reported, by key; empty if none or unreadable."""
    return _read_section(path, "failing")


def read_raw_endings(path: Path) -> dict[str, dict[str, Any]]:
    """The sessions whose consolidation last ended raw, by key; empty if none or unreadable."""
    return _read_section(path, "raw")


def _read_section(path: Path, name: str) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # or nested past what the decoder recurses
        return {}
    section = data.get(name) if isinstance(data, dict) else None
    if not isinstance(section, dict):
        return {}
    return {key: entry for key, entry in section.items() if isinstance(entry, dict)}


def _raw_endings(report: dict[str, dict[str, Any]]) -> dict[str, RawEnding]:
    """The raw endings of an earlier process's report; an entry of the wrong shape is dropped."""
    endings = {}
    for key, entry in report.items():
        chunks, messages, at, error = (entry.get(f) for f in ("chunks", "messages", "at", "error"))
        if isinstance(chunks, int) and isinstance(messages, int) and isinstance(at, int | float):
            endings[key] = RawEnding(chunks, messages, float(at), str(error or ""))
    return endings
