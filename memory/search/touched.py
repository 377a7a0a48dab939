"""The files this process wrote since the search index last looked, and when it last looked at all.

The session store reports each file it appended to or moved (`add`, from any thread); a refresh
before a search then re-reads those files (and memory/, always) instead of every session of the
workspace, and looks at everything only every FULL_SCAN_EVERY seconds, which is how soon another
process's writes (a `memgate chat` beside the service, a hand edit in sessions/) are seen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

FULL_SCAN_EVERY = 60.0  # seconds


class TouchedFiles:
    """A set of written paths, taken whole by each refresh, and the clock of full scans."""

    def __init__(
        self,
        full_scan_every: float = FULL_SCAN_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.full_scan_every = full_scan_every
        self._clock = clock
        # The store adds from the event loop, a refresh takes in a worker thread.
        self._lock = threading.Lock()
        self._paths: set[Path] = set()
        self._full_at: float | None = None

    def add(self, path: Path) -> None:
        """Record that `path` was written. Called after the write: a refresh that takes the set
        before then runs after the bytes are in the file."""
        with self._lock:
            self._paths.add(path)

    def take(self, full: bool = False) -> set[Path] | None:
        """The paths written since the last take, or None when everything is to be scanned: at the
        first take, when `full` is asked, or FULL_SCAN_EVERY after the last full scan."""
        now = self._clock()
        with self._lock:
            paths, self._paths = self._paths, set()
            if full or self._full_at is None or now - self._full_at >= self.full_scan_every:
                self._full_at = now
                return None
            return paths

    def give_back(self, taken: set[Path] | None) -> None:
        """Return what a refresh cut short took: its paths, or (None) the full scan it began."""
        with self._lock:
            if taken is None:
                self._full_at = None
            else:
                self._paths |= taken
