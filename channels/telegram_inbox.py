"""The Telegram channel's inbox: a write-ahead journal of received updates, so that a process killed
between receiving a message and storing it loses nothing.

Stdlib only: it imports neither the Telegram SDK nor anything of ours.

The file holds one JSON object per line, each appended with a single `os.write` on an O_APPEND
descriptor: `{"update": {...}}` when an update arrives (its Bot API JSON), `{"done": update_id}` once
it has been handled or refused. Lines are not fsynced: they survive a killed process, whose writes
the kernel already holds, not a power cut. At start `open()` returns the updates without a done
line, oldest first, and rewrites the file with only those.

Nothing is ever dropped for having been replayed often: under load, or while something else
makes the service crash and restart, a message may wait through many starts. A message that
itself kills the process would come back at every start; its line can be deleted by hand.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from memory.fileio import atomic_write

log = logging.getLogger(__name__)

Json = dict[str, Any]
TRUNCATE_AT = 1 << 20  # bytes: a journal this large is emptied whenever nothing is pending


class Inbox:
    """The journal of one bot's updates: `open()` once, then `append` and `finish` each update."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._pending: set[int] = set()
        self._size = 0
        self._torn = False  # the last write was cut short: the next line starts on a new one

    def open(self) -> list[Json]:
        """Read the journal, compact it to the unfinished updates and open it for appending.

        Returns those updates in update_id order. Blocking: call it from a thread.
        """
        if self._fd is not None:
            raise RuntimeError("Inbox.open() was already called")
        kept = [update for _, update in sorted(self._read().items())]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rewrite(kept)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._pending = {int(update["update_id"]) for update in kept}
        return kept

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def holds(self, update_id: int) -> bool:
        """Whether the update was received and is not finished yet."""
        return update_id in self._pending

    def append(self, update: Json) -> None:
        """Journal a received update, before anything acts on it."""
        self._pending.add(int(update["update_id"]))
        self._write({"update": update})

    def finish(self, update_id: int) -> None:
        """The update needs no replay: handled, refused or ignored. Repeats are no-ops."""
        if update_id not in self._pending:
            return
        self._pending.discard(update_id)
        self._write({"done": update_id})
        if not self._pending and self._size > TRUNCATE_AT and self._fd is not None:
            # Nothing in it is needed any more; with O_APPEND the next line starts at 0.
            try:
                os.ftruncate(self._fd, 0)
                self._size = 0
            except OSError as exc:
                log.warning("telegram inbox could not truncate path=%s error=%s", self.path, exc)

    # -- the file ---------------------------------------------------------------------------------
    def _write(self, record: Json) -> None:
        if self._fd is None:
            return
        # ensure_ascii keeps the file ASCII, lone surrogates included (as \ud800 escapes).
        line = json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"
        if self._torn:
            line = b"\n" + line
        try:
            written = os.write(self._fd, line)
        except OSError as exc:
            log.warning("telegram inbox could not write path=%s error=%s", self.path, exc)
            return
        self._size += written
        self._torn = written < len(line)
        if self._torn:
            log.warning("telegram inbox write cut short path=%s", self.path)

    def _read(self) -> dict[int, Json]:
        """The unfinished updates by id."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        entries: dict[int, Json] = {}
        for number, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if "done" in record:
                    entries.pop(int(record["done"]), None)
                else:
                    update = record["update"]
                    entries[int(update["update_id"])] = update
            except (ValueError, KeyError, TypeError):
                # A line torn by a kill or a full disk: what it held is lost, the rest is not.
                log.warning(
                    "telegram inbox skipping an unreadable line path=%s line=%d", self.path, number
                )
        return entries

    def _rewrite(self, kept: list[Json]) -> None:
        if not kept:
            # Nothing to keep, so a kill halfway through loses nothing either.
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.path, 0)
            return
        lines = [json.dumps({"update": update}, separators=(",", ":")) + "\n" for update in kept]
        atomic_write(self.path, "".join(lines))
