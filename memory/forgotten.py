"""Lines the owner asked to forget, kept in the state folder, and how memory lines are compared.

`/forget` removes lines from MEMORY.md (and today's note) and records them here; consolidation
reads them back to tell the model, and drops any `memory_update` line that matches one, so a
forgotten fact is not filed again from HISTORY.md, which keeps its entries. `normalise` is the one
comparison of memory lines: duplicates and forgotten lines are both found by it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from datetime import UTC, datetime
from pathlib import Path

from memory.fileio import atomic_write

log = logging.getLogger(__name__)

FORGOTTEN_FILE = "forgotten-lines.json"  # its name in the state folder
MAX_KEPT = 500  # the newest lines kept; the file is read by every consolidation call
# A forgotten line of at least this many words also matches a longer line that holds it whole
# ("- likes tea" forgotten must not take "- the user likes tea with lemon"'s every cousin).
CONTAINED_FROM_WORDS = 4

_NOT_WORD = re.compile(r"[^\w\s]+")


def normalise(line: str) -> str:
    """`line` as compared: case folded, punctuation (bullets included) gone, spaces collapsed."""
    return " ".join(_NOT_WORD.sub(" ", line.casefold()).replace("_", " ").split())


def matches_forgotten(line: str, forgotten: str) -> bool:
    """Whether memory line `line` restates `forgotten` (both already normalised)."""
    if not line or not forgotten:
        return False
    if line == forgotten:
        return True
    return len(forgotten.split()) >= CONTAINED_FROM_WORDS and f" {forgotten} " in f" {line} "


class ForgottenLines:
    """The forgotten lines' file; read on every use, so the agent's `/forget` and the
    consolidator (two objects on one file) agree without sharing memory."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._writing = threading.Lock()

    def lines(self) -> list[str]:
        """The forgotten lines as they were written, oldest first; empty if none or unreadable."""
        return [entry["text"] for entry in self._entries()]

    def _entries(self) -> list[dict[str, str]]:
        if self.path is None:
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:  # a damaged file forgets nothing new, loudly
            log.warning("forgotten lines not read path=%s error=%s", self.path, exc)
            return []
        entries = data.get("lines") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            return []
        return [
            {"text": e["text"], "at": str(e.get("at", ""))}
            for e in entries
            if isinstance(e, dict) and isinstance(e.get("text"), str)
        ]

    def normalised(self) -> list[str]:
        return [n for n in (normalise(line) for line in self.lines()) if n]

    def add(self, lines: list[str]) -> None:
        """Record `lines` as forgotten now (a line already recorded is not added twice)."""
        if self.path is None:
            raise ValueError("forgotten lines have no file to be kept in")
        with self._writing:
            entries = self._entries()
            known = {normalise(entry["text"]) for entry in entries}
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            for line in lines:
                key = normalise(line)
                if key and key not in known:
                    known.add(key)
                    entries.append({"text": line.strip(), "at": stamp})
            payload = {"lines": entries[-MAX_KEPT:]}
            atomic_write(self.path, json.dumps(payload, ensure_ascii=False, indent=1))
