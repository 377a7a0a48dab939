"""Numbers: percentiles within one run, min/median/max across runs, and one row of the table."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def spread(values: list[float]) -> tuple[float, float, float]:
    """(min, median, max) of the per-run values."""
    return min(values), statistics.median(values), max(values)


@dataclass
class Row:
    """One line of the table: a metric of one figure, one value per run for each system.

    `ratio` is memgate's median divided by nanobot's, whatever the metric: below 1 means memgate
    has less of it (good for latency, memory, tokens), above 1 more (good for throughput).
    """

    key: str  # stable id the targets refer to, e.g. "a.tps.100"
    figure: str
    metric: str
    unit: str
    memgate: list[float] = field(default_factory=list)
    nanobot: list[float] = field(default_factory=list)
    digits: int = 1

    def median(self, system: str) -> float:
        return statistics.median(getattr(self, system))

    @property
    def ratio(self) -> float | None:
        if not self.memgate or not self.nanobot or self.median("nanobot") == 0:
            return None
        return self.median("memgate") / self.median("nanobot")

    def cell(self, system: str) -> str:
        values = getattr(self, system)
        if not values:
            return "—"
        low, mid, high = spread(values)
        if low == high:
            return f"{mid:,.{self.digits}f}"
        return f"{low:,.{self.digits}f} / **{mid:,.{self.digits}f}** / {high:,.{self.digits}f}"
