"""Consolidation failures per session: counts, exponential backoff, and a report file for status.

The consolidator records every failure in its write path here; a session with failures waits out a
capped, jittered backoff before its next attempt. With a `path`, the failing sessions are also
written to a small JSON file (through memory.fileio) so `memgate status`, another process, can
show them.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
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


class FailureLog:
    """Failure counts and backoff deadlines by session key."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.total = 0
        self._sessions: dict[str, Failing] = {}

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
        """`key` succeeded: its count and backoff start over."""
        if self._sessions.pop(key, None) is not None:
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
        try:
            atomic_write(self.path, json.dumps({"failing": report}, ensure_ascii=False))
        except OSError as exc:  # the report is a courtesy; the disk may be what is failing
            log.debug(
                "cannot write the consolidation failure report path=%s error=%s", self.path, exc
            )


def read_failure_report(path: Path) -> dict[str, dict[str, Any]]:
    """The failing sessions a running gateway reported, by key; empty if none or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # or nested past what the decoder recurses
        return {}
    failing = data.get("failing") if isinstance(data, dict) else None
    return failing if isinstance(failing, dict) else {}
