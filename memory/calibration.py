"""How many of the model server's tokens one of memgate's counted tokens is, learnt per model and
kept in a small JSON file in the state folder. Imports nothing of ours but the atomic writer.

memgate counts with tiktoken (memory/tokens.py). A local server's own tokenizer can need up to
three times as many tokens for the same text (digits one by one, Cyrillic letter by letter), so a
prompt within memgate's count can be over the server's context. The gateway tells this module what
the server reported about prompts memgate counted (usage, its /tokenize, the count a context-length
refusal names); the prompt budget (memory/budget.py) divides its limit by the ratio learnt.

The ratio is never below 1.0 (memgate's count is the floor) nor above MAX_RATIO; the first reading
sets it, each later usage reading moves it part of the way (one odd prompt does not swing it),
and a refusal sets it at once. The room a refusal names is held for the process only.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from pathlib import Path
from typing import Any

from memory.fileio import atomic_write

log = logging.getLogger(__name__)

MIN_RATIO, MAX_RATIO = 1.0, 4.0
# Prompts under this many counted tokens are not learnt from: the chat template's own tokens
# would say more than the tokenizer.
MIN_SAMPLE = 64
SMOOTHING = 0.3  # share of the way to a new usage reading
MARGIN = 0.05  # kept free after a refusal, on the ratio and on the room the server named
_SAVE_STEP = 0.02  # a change of the ratio smaller than this is not written


def _bounded(ratio: float) -> float:
    if not math.isfinite(ratio):
        return MAX_RATIO
    return min(MAX_RATIO, max(MIN_RATIO, ratio))


class TokenCalibration:
    """The server's tokens per counted token for one model (1.0 until the server says more), kept
    in `path` (None: in memory only), and the most prompt tokens a refusal said the server has
    room for, held for this process only: a server restarted with a larger context is not held
    to the old one.

    Read from worker threads (the budget) and written from the event loop: each field is one
    assignment, and the file is written under a lock by one writer at a time.
    """

    def __init__(self, path: Path | None, model: str) -> None:
        self.path = path
        self.model = model
        self.ratio = MIN_RATIO
        self.room: int | None = None
        self.source = ""  # what set the ratio last: usage, tokenize or refusal ("": nothing yet)
        self._saved = MIN_RATIO
        self._writing = threading.Lock()
        if path is not None:
            self._load(path)

    @property
    def learnt(self) -> bool:
        """Whether the server has told us anything about this model's tokens yet."""
        return bool(self.source)

    def scaled(self, limit: int) -> int:
        """`limit` (in the server's tokens) as counted tokens: within the room the server named,
        divided by the ratio."""
        if self.room is not None:
            limit = min(limit, int(self.room * (1 - MARGIN)))
        return max(1, int(limit / self.ratio))

    def observe(self, counted: int, reported: int, source: str = "usage") -> bool:
        """The server reported `reported` tokens for a prompt memgate counted as `counted`; move
        the ratio part of the way there (all of it for a first reading). True when the change is
        worth writing."""
        if counted < MIN_SAMPLE or reported <= 0:
            return False
        seen = _bounded(reported / counted)
        first = not self.learnt
        self.ratio = seen if first else _bounded(self.ratio + SMOOTHING * (seen - self.ratio))
        self.source = source
        if first:
            log.info("token ratio learnt model=%s ratio=%.2f source=%s", self.model, seen, source)
        return first or abs(self.ratio - self._saved) >= _SAVE_STEP

    def refused(self, counted: int, reported: int | None, room: int | None) -> None:
        """The server refused a prompt memgate counted as `counted`: it was `reported` tokens by
        its count, and it has `room` for a prompt (either may be unknown). Set the ratio from
        this prompt with a margin (raise it by half when the server named no count)."""
        if reported and counted:
            self.ratio = _bounded(reported / counted * (1 + MARGIN))
        else:
            self.ratio = _bounded(self.ratio * 1.5)
        if room is not None and room > 0:
            self.room = room if self.room is None else min(self.room, room)
        self.source = "refusal"
        log.warning(
            "prompt over the model's context; token ratio now model=%s ratio=%.2f room=%s",
            self.model,
            self.ratio,
            self.room,
        )

    # -- the file ----------------------------------------------------------------------------------
    def _load(self, path: Path) -> None:
        entry = _read(path).get(self.model)
        if not isinstance(entry, dict):
            return
        ratio = entry.get("ratio")
        if isinstance(ratio, int | float) and not isinstance(ratio, bool):
            self.ratio = self._saved = _bounded(float(ratio))
            self.source = str(entry.get("source") or "file")

    def save(self) -> None:
        """Write this model's entry, keeping the others' (blocking: call it in a worker thread)."""
        if self.path is None:
            return
        with self._writing:
            models = _read(self.path)
            models[self.model] = {"ratio": round(self.ratio, 4), "source": self.source}
            try:
                atomic_write(self.path, json.dumps({"models": models}, indent=2) + "\n")
            except OSError as exc:
                log.warning("cannot write token calibration path=%s error=%s", self.path, exc)
                return
            self._saved = self.ratio


def _read(path: Path) -> dict[str, Any]:
    """The file's entries by model; an unreadable file counts as none (it is learnt again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("token calibration unreadable, learnt afresh path=%s error=%s", path, exc)
        return {}
    models = data.get("models") if isinstance(data, dict) else None
    return dict(models) if isinstance(models, dict) else {}
