"""The report: machine and versions, the table of figures, and whether each target of issue 7 is met.

Rendered as Markdown, printed and written to docs/benchmarks.md.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.stats import Row
from bench.venvs import REPO

FIGURES = {
    "a": "a. Overhead per turn, instant LLM (20 turns per chat)",
    "b": "b. Persistence and context build vs. stored history",
    "c": "c. Reply latency while consolidation is held",
    "d": "d. Process start to first reply",
    "e": "e. Memory: RSS after start and peak (VmHWM), fresh process per run, Telegram channel loaded",
    "f": "f. Prompt tokens over a 300-turn chat (context window 16,384, max_tokens 2,048)",
    "g": "g. Time to first visible text (400-token reply written at 50 tokens/s)",
    "h": "h. A year of a busy bot: 10,000 chats, 1,000,000 stored messages (memgate alone)",
    "i": "i. MCP servers at start (memgate alone)",
    "j": "j. Memory that does not feed on itself: a 300-turn chat recalling memory every 5th turn (memgate alone)",
}


@dataclass(frozen=True)
class Target:
    """One goal of the issue, judged on medians."""

    text: str
    value: Callable[[dict[str, Row]], float]
    met: Callable[[float], bool]
    shown: str  # format of the value, e.g. "{:.1f}×"


TARGETS = [
    Target(
        "a: memgate's turns/s at 100 chats ≥ 8× nanobot's",
        lambda r: r["a.tps.100"].median("memgate") / r["a.tps.100"].median("nanobot"),
        lambda v: v >= 8,
        "{:.2f}×",
    ),
    Target(
        "a: memgate's p99 overhead per turn < 3 ms (1 chat: p99 turn latency − median bare LLM "
        "round trip)",
        lambda r: r["a.p99.1"].median("memgate") - r["a.floor"].median("memgate"),
        lambda v: v < 3,
        "{:.2f} ms",
    ),
    Target(
        "b: memgate's first turn after start at 100k stored messages (consolidated) within 2× "
        "of at 10",
        lambda r: (
            r["b.cold.consolidated.100000"].median("memgate")
            / r["b.cold.consolidated.10"].median("memgate")
        ),
        lambda v: v <= 2,
        "{:.2f}×",
    ),
    Target(
        "b: memgate's turn below nanobot's at every size, consolidated or not, cold and warm "
        "(the largest ratio)",
        lambda r: max(
            row.median("memgate") / row.median("nanobot")
            for key, row in r.items()
            if key.startswith("b.")
        ),
        lambda v: v < 1,
        "{:.2f}×",
    ),
    Target(
        "c: memgate's reply with consolidation held within 1.2× of without",
        lambda r: r["c.ratio"].median("memgate"),
        lambda v: v <= 1.2,
        "{:.2f}×",
    ),
    Target(
        "d: memgate's process start to first reply ≤ 0.5 s (median)",
        lambda r: r["d.first"].median("memgate"),
        lambda v: v <= 500,
        "{:,.0f} ms",
    ),
    Target(
        "d: memgate's process start to first reply below nanobot's",
        lambda r: r["d.first"].median("memgate") / r["d.first"].median("nanobot"),
        lambda v: v < 1,
        "{:.2f}×",
    ),
    Target(
        "e: memgate's RSS after start at or below nanobot's (both with their Telegram channel)",
        lambda r: r["e.start"].median("memgate") / r["e.start"].median("nanobot"),
        lambda v: v <= 1,
        "{:.2f}×",
    ),
    Target(
        "e: memgate's peak RSS for 10k chats < 100 MB (with its Telegram channel)",
        lambda r: r["e.rss.10000"].median("memgate"),
        lambda v: v < 100,
        "{:.1f} MB",
    ),
    Target(
        "f: memgate's max prompt never above the budget",
        lambda r: max(r["f.over"].memgate),
        lambda v: v == 0,
        "{:.0f} turns over",
    ),
    Target(
        "f: memgate's consolidation calls ≤ nanobot's",
        lambda r: r["f.calls"].median("memgate") / r["f.calls"].median("nanobot"),
        lambda v: v <= 1,
        "{:.2f}×",
    ),
    Target(
        "f: memgate's prompt tokens of the whole chat (chat + consolidation) ≤ 0.9× nanobot's",
        lambda r: r["f.total"].median("memgate") / r["f.total"].median("nanobot"),
        lambda v: v <= 0.9,
        "{:.2f}×",
    ),
    Target(
        "h: `memgate run` on a year's workspace: start to first reply ≤ 1 s",
        lambda r: r["h.first"].median("memgate"),
        lambda v: v <= 1000,
        "{:,.0f} ms",
    ),
    Target(
        "h: memory search p99 over the year ≤ 100 ms",
        lambda r: r["h.search.p99"].median("memgate"),
        lambda v: v <= 100,
        "{:,.1f} ms",
    ),
    Target(
        "h: peak RSS after 1,000 chats talked on the year's workspace ≤ 150 MB",
        lambda r: r["h.peak"].median("memgate"),
        lambda v: v <= 150,
        "{:.1f} MB",
    ),
    Target(
        "i: `chat -m` with four MCP servers configured (one hanging) within 1.1× of without",
        lambda r: r["i.chat.ratio"].median("memgate"),
        lambda v: v <= 1.1,
        "{:.2f}×",
    ),
    Target(
        "i: `memgate run` with a hanging MCP server healthy and answering Telegram within 1 s "
        "of start (the later of the two)",
        lambda r: max(r["i.run.healthy"].median("memgate"), r["i.run.reply"].median("memgate")),
        lambda v: v <= 1000,
        "{:,.0f} ms",
    ),
    Target(
        "j: no recall of memory filed into MEMORY.md again over the 300-turn chat",
        lambda r: r["j.refiled"].median("memgate"),
        lambda v: v == 0,
        "{:.0f} lines",
    ),
]


def machine(versions: dict[str, str]) -> list[str]:
    """Lines describing where and with what the figures were measured."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return [
        f"- Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        f"- Python: {platform.python_version()} (both systems, each in its own venv)",
        f"- memgate {versions['memgate']} (commit {commit or 'unknown'}); "
        f"nanobot-ai {versions['nanobot']}; openai SDK {versions['openai']} in both",
        f"- Load average (1 min) at start and end: {versions['load']} — the machine is shared "
        f"with other work, so absolute figures carry that noise; ratios less so",
    ]


def render(rows: list[Row], versions: dict[str, str], notes: list[str]) -> str:
    """The whole of docs/benchmarks.md."""
    by_key = {row.key: row for row in rows}
    out = ["# Benchmarks: memgate and nanobot side by side", ""]
    out += [
        "Measured by `make bench` (`python -m bench`) in one run, on one machine, both systems "
        "against the same fake OpenAI-compatible server (`tests/fakes/llm.py`) on loopback. "
        "Cells are min / **median** / max over the runs; the ratio is memgate's median ÷ "
        "nanobot's (below 1: memgate has less of it).",
        "",
        *machine(versions),
        "",
        "## Targets",
        "",
    ]
    for target in TARGETS:
        try:
            value = target.value(by_key)
        except (KeyError, ValueError):  # its figure was not run (`--only`): no row, or none of b's
            continue
        verdict = "met" if target.met(value) else "**missed**"
        out.append(f"- {target.text}: {target.shown.format(value)} — {verdict}")
    out += ["", "## Figures", ""]
    for figure, title in FIGURES.items():
        if not any(r.figure == figure for r in rows):
            continue
        out += [
            f"### {title}",
            "",
            "| metric | unit | memgate | nanobot | ratio |",
            "|---|---|---|---|---|",
        ]
        for row in (r for r in rows if r.figure == figure):
            ratio = f"{row.ratio:.2f}" if row.ratio is not None else "—"
            out.append(
                f"| {row.metric} | {row.unit} | {row.cell('memgate')} | {row.cell('nanobot')} | {ratio} |"
            )
        out.append("")
    out += ["![b and f](benchmarks.png)", "", "## How it was measured", "", *notes, ""]
    return "\n".join(out)
