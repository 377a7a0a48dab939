"""What a consolidation's `memory_update` may bring into MEMORY.md: no repeats, nothing forgotten,
and not the loss of most of the file.

`UpdateCurator.curate` takes the current MEMORY.md and the model's update, and returns the text to
write: a line that repeats another (compared by `memory.forgotten.normalise`: case, spaces and
punctuation aside) is dropped, the line already in MEMORY.md kept; a new line that restates one
the owner asked to forget is dropped. An update that would still drop more than
`max_drop_share` of MEMORY.md's lines raises `UpdateRefusedError` before anything is written.
What was dropped and refused is counted, and kept in a small file in the state folder for
`memgate status`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memory.errors import UpdateRefusedError
from memory.fileio import atomic_write
from memory.forgotten import ForgottenLines, matches_forgotten, normalise

log = logging.getLogger(__name__)

UPDATE_REPORT = "memory-updates.json"  # its name in the state folder


@dataclass(frozen=True)
class UpdateRules:
    """How much of MEMORY.md one update may drop, and from which size the rule applies."""

    max_drop_share: float = 0.5
    guard_from_lines: int = 20


@dataclass
class UpdateCounts:
    """What curating updates has dropped and refused, since the state folder was made."""

    duplicates_dropped: int = 0
    forgotten_dropped: int = 0
    refused: int = 0
    last_refused: dict[str, Any] = field(default_factory=dict)  # {"at": wall clock, "reason"}


def _keys(text: str) -> list[str]:
    return [key for key in (normalise(line) for line in text.splitlines()) if key]


class UpdateCurator:
    """Curates memory_updates by `rules`, against the forgotten lines; counts what it drops."""

    def __init__(
        self,
        rules: UpdateRules | None = None,
        forgotten: ForgottenLines | None = None,
        report: Path | None = None,
    ) -> None:
        self.rules = rules or UpdateRules()
        self.forgotten = forgotten or ForgottenLines(None)
        self.report = report
        self.counts = read_update_counts(report) if report is not None else UpdateCounts()
        self._counting = threading.Lock()  # curate runs in the workers' threads

    def forgotten_lines(self) -> list[str]:
        """The lines consolidation is told never to write back."""
        return self.forgotten.lines()

    def curate(self, previous: str, update: str) -> str:
        """The text to write for `update` over `previous` (see the module's docstring)."""
        existing = set(_keys(previous))
        verbatim = {line.strip() for line in previous.splitlines()}
        forgotten = self.forgotten.normalised()
        seen: set[str] = set()
        # A repeat of a line MEMORY.md holds is dropped wherever it stands, the old line kept.
        kept_old = {normalise(ln) for ln in update.splitlines() if ln.strip() in verbatim}
        out: list[str] = []
        duplicates = dropped_forgotten = 0
        for line in update.splitlines():
            key = normalise(line)
            new = line.strip() not in verbatim
            if key and (key in seen or (new and key in existing and key in kept_old)):
                duplicates += 1
                continue
            if key and new and any(matches_forgotten(key, f) for f in forgotten):
                dropped_forgotten += 1
                continue
            if key:
                seen.add(key)
            out.append(line)
        text = "\n".join(out) + ("\n" if update.endswith("\n") else "")
        self._check_drops(existing, set(_keys(text)))
        if duplicates or dropped_forgotten:
            log.info(
                "memory_update lines dropped duplicates=%d forgotten=%d",
                duplicates,
                dropped_forgotten,
            )
            with self._counting:
                self.counts.duplicates_dropped += duplicates
                self.counts.forgotten_dropped += dropped_forgotten
                self._save()
        return text

    def _check_drops(self, existing: set[str], kept: set[str]) -> None:
        if len(existing) < self.rules.guard_from_lines:
            return
        lost = len(existing - kept)
        if lost / len(existing) <= self.rules.max_drop_share:
            return
        reason = (
            f"memory_update dropped {lost} of MEMORY.md's {len(existing)} lines (more than "
            f"{self.rules.max_drop_share:.0%}); keep every existing fact and add the new ones"
        )
        log.warning("memory_update refused lost=%d lines=%d", lost, len(existing))
        with self._counting:
            self.counts.refused += 1
            self.counts.last_refused = {"at": time.time(), "reason": reason}
            self._save()
        raise UpdateRefusedError(reason)

    def _save(self) -> None:
        if self.report is None:
            return
        try:
            atomic_write(self.report, json.dumps(asdict(self.counts), ensure_ascii=False))
        except OSError as exc:  # the counts are for status; the disk may be what is failing
            log.debug("memory update counts not written path=%s error=%s", self.report, exc)


def read_update_counts(path: Path) -> UpdateCounts:
    """The counts a gateway kept in `path`; zeros if none or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return UpdateCounts()
    if not isinstance(data, dict):
        return UpdateCounts()
    numbers = {
        name: value
        for name in ("duplicates_dropped", "forgotten_dropped", "refused")
        if isinstance(value := data.get(name), int)
    }
    last = data.get("last_refused")
    return UpdateCounts(**numbers, last_refused=last if isinstance(last, dict) else {})


def describe_updates(path: Path) -> str:
    """`memgate status`'s line: what curating updates dropped and refused, from its file."""
    counts = read_update_counts(path)
    line = (
        f"memory updates: {counts.duplicates_dropped} repeated line(s) and "
        f"{counts.forgotten_dropped} forgotten line(s) dropped, {counts.refused} refused"
    )
    reason = counts.last_refused.get("reason")
    return f"{line} (last: {reason})" if counts.refused and reason else line
