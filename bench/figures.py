"""Figures a, b, c, e and f: runs each system's driver several times and turns results into rows.

Runs alternate between the systems (memgate, nanobot, memgate, …) so that drift on the machine
lands on both. Every run is a fresh process with a fresh workspace.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.runner import Bench, System
from bench.stats import Row, percentile
from tests.fakes.llm import is_consolidation

SESSIONS = (1, 10, 100)
TURNS_PER_SESSION = 20
SIZES = (10, 1_000, 10_000, 100_000)
TIMED_TURNS = 5
# Figure b with nothing consolidated: at 100k messages each of nanobot's turns takes about a
# minute on 2 shared cores (a ~16 MB prompt, its token estimate and a whole-file save), so this
# variant gets one run of 2 timed turns.
WHOLE_RUNS = 1
WHOLE_TURNS = 2
HOLD_SECONDS = 5.0
HELD_SAMPLES = 5  # the workload's default
MEMGATE_WINDOW = 10  # consolidation after 5 turns
NANOBOT_MARGIN = 650  # tokens over its fixed prompt: consolidation after about 5 turns
RSS_SESSIONS = (1_000, 10_000)
LONG_TURNS = 300
LONG_WINDOW = 16_384
LONG_MAX_TOKENS = 2_048


@dataclass(frozen=True)
class Plan:
    """How many runs each figure gets (the full bench must stay under ~15 minutes)."""

    overhead: int = 3
    history: int = 3
    held: int = 5
    startup: int = 5
    rss_small: int = 3
    rss_large: int = 2
    prompts: int = 2
    year: int = 2  # h, memgate alone


def repeat(
    bench: Bench, systems: list[System], runs: int, figure: str, params: dict[str, Any]
) -> dict[str, list[Any]]:
    """`runs` results per system, alternating systems, with the fake's counts reset each time."""
    results: dict[str, list[Any]] = {s.name: [] for s in systems}
    for number in range(runs):
        for system in systems:
            print(f"  {figure} {system.name} run {number + 1}/{runs}", flush=True)
            bench.llm.reset(keep_requests=figure == "prompts")
            result = bench.drive(system, figure, params)
            if figure == "prompts":
                result["requests"] = bench.llm.requests()
            results[system.name].append(result)
    return results


def row_maker(figure: str, results: dict[str, list[Any]]) -> Callable[..., Row]:
    """`row(key, metric, unit, pick, digits)`: a Row of `figure` with `pick(result)` per run."""

    def row(key: str, metric: str, unit: str, pick: Callable[[Any], float], digits: int = 1) -> Row:
        values = {name: [float(pick(r)) for r in runs] for name, runs in results.items()}
        return Row(key, figure, metric, unit, values["memgate"], values["nanobot"], digits)

    return row


def overhead(bench: Bench, systems: list[System], runs: int) -> list[Row]:
    """a. Per-turn latency (p50, p99) and turns/s with an instant LLM, 1/10/100 chats of 20 turns.

    The single chat is played 5 times in a row (fresh chat each time) so its p99 rests on 100
    turns rather than being the maximum of 20.
    """
    params = {"sessions": list(SESSIONS), "turns": TURNS_PER_SESSION, "rounds": {"1": 5}}
    row = row_maker("a", repeat(bench, systems, runs, "overhead", params))
    rows = [
        row("a.floor", "LLM round trip alone, p50", "ms", lambda r: percentile(r["floor"], 50), 2)
    ]
    for n in SESSIONS:
        chats = f"{n} concurrent chat{'s' if n > 1 else ''}"

        def level(r: Any, n: int = n) -> dict[str, Any]:
            return r[str(n)]

        rows += [
            row(
                f"a.p50.{n}",
                f"turn latency p50, {chats}",
                "ms",
                lambda r, f=level: percentile(f(r)["latencies_ms"], 50),
                2,
            ),
            row(
                f"a.p99.{n}",
                f"turn latency p99, {chats}",
                "ms",
                lambda r, f=level: percentile(f(r)["latencies_ms"], 99),
                2,
            ),
            row(
                f"a.tps.{n}",
                f"turns/s, {chats}",
                "turns/s",
                lambda r, f=level: len(f(r)["latencies_ms"]) / f(r)["wall_s"],
                0,
            ),
        ]
    return rows


HISTORY_LABELS = {"consolidated": "all but 10 consolidated", "whole": "none consolidated"}


def history(bench: Bench, systems: list[System], runs: int) -> tuple[list[Row], dict[str, Any]]:
    """b. One turn's cost when the chat's file already holds N messages, consolidated or not."""
    results = {name: [dict[str, Any]() for _ in range(runs)] for name in (s.name for s in systems)}
    for variant, variant_runs, turns in (
        ("consolidated", runs, TIMED_TURNS),
        ("whole", min(runs, WHOLE_RUNS), WHOLE_TURNS),
    ):
        params = {"sizes": list(SIZES), "turns": turns, "variants": [variant]}
        for name, got in repeat(bench, systems, variant_runs, "history", params).items():
            for number, result in enumerate(got):
                results[name][number].update(result)
    rows = []
    for variant, label in HISTORY_LABELS.items():
        turns = TIMED_TURNS if variant == "consolidated" else WHOLE_TURNS
        row = row_maker("b", {n: [r for r in rs if variant in r] for n, rs in results.items()})
        rows += [
            row(
                f"b.cold.{variant}.{n}",
                f"first turn after start (loads the file), {n:,} stored, {label}",
                "ms",
                lambda r, v=variant, k=str(n): r[v][k]["cold_ms"],
                2,
            )
            for n in SIZES
        ]
        rows += [
            row(
                f"b.warm.{variant}.{n}",
                f"next turns (median of {turns}), {n:,} stored, {label}",
                "ms",
                lambda r, v=variant, k=str(n): statistics.median(r[v][k]["turn_ms"]),
                2,
            )
            for n in SIZES
        ]
    plot: dict[str, Any] = {"sizes": list(SIZES), "series": {}}
    for name, runs_ in results.items():
        for variant in HISTORY_LABELS:
            got = [r for r in runs_ if variant in r]
            for kind, pick in (
                ("cold", lambda r, v, n: r[v][str(n)]["cold_ms"]),
                ("warm", lambda r, v, n: statistics.median(r[v][str(n)]["turn_ms"])),
            ):
                plot["series"][f"{name}, {kind}, {variant}"] = [
                    statistics.median(pick(r, variant, n) for r in got) for n in SIZES
                ]
    return rows, plot


def held(bench: Bench, systems: list[System], runs: int) -> list[Row]:
    """c. Reply latency while the chat's consolidation call is held 5 s, against no consolidation."""
    params = {
        "hold": HOLD_SECONDS,
        "window": MEMGATE_WINDOW,
        "margin": NANOBOT_MARGIN,
        "max_tokens": 4096,
    }
    row = row_maker("c", repeat(bench, systems, runs, "held", params))
    median = statistics.median
    return [
        row(
            "c.held",
            f"reply latency while the call is held {HOLD_SECONDS:.0f} s (median of the turns sent meanwhile)",
            "ms",
            lambda r: median(r["held_ms"]),
        ),
        row(
            "c.plain",
            "the same turns on a twin where nothing consolidates (median)",
            "ms",
            lambda r: median(r["plain_ms"]),
        ),
        row(
            "c.ratio",
            "held ÷ not held",
            "×",
            lambda r: median(r["held_ms"]) / median(r["plain_ms"]),
            2,
        ),
        row(
            "c.count",
            f"turns sent while the call was held (at most {HELD_SAMPLES})",
            "turns",
            lambda r: len(r["held_ms"]),
            0,
        ),
        row(
            "c.turn", "first of them: turn number in the chat", "turn", lambda r: r["held_turn"], 0
        ),
    ]


def rss(bench: Bench, systems: list[System], plan: Plan) -> list[Row]:
    """e. Memory of a fresh process that has imported what its gateway command imports, with
    the Telegram channel: resident after start (before any turn), and its peak (VmHWM) once N
    chats have each had one turn."""
    both = {"sessions": 0, "channels": ["telegram", "discord"]}
    rows = [
        row_maker("e", repeat(bench, systems, plan.rss_small, "rss", both))(
            "e.start.channels",
            "RSS after start, Telegram and Discord channels loaded (what `memgate run` with both "
            "costs)",
            "MB",
            lambda r: r["startup_mb"],
        )
    ]
    for n, runs in zip(RSS_SESSIONS, (plan.rss_small, plan.rss_large), strict=True):
        row = row_maker("e", repeat(bench, systems, runs, "rss", {"sessions": n}))
        if n == RSS_SESSIONS[0]:
            rows.append(
                row(
                    "e.start",
                    "RSS after start, before the first turn",
                    "MB",
                    lambda r: r["startup_mb"],
                )
            )
        rows.append(
            row(
                f"e.rss.{n}",
                f"peak RSS after {n:,} chats had one turn each",
                "MB",
                lambda r: r["peak_mb"],
            )
        )
        rows.append(
            row(
                f"e.end.{n}",
                f"RSS once those {n:,} turns are over",
                "MB",
                lambda r: r["end_mb"],
            )
        )
        rows.append(
            row(
                f"e.wall.{n}",
                f"time for those {n:,} turns (16 at a time)",
                "s",
                lambda r: r["wall_s"],
            )
        )
    return rows


def prompts(
    bench: Bench, systems: list[System], runs: int, counter: Any
) -> tuple[list[Row], dict[str, Any]]:
    """f. Prompt tokens per turn over a 300-turn chat, same context window; consolidation calls.

    Prompts are counted at the fake, the same way for both systems: every message's text with the
    model's tokenizer (o200k_base for gpt-4o-mini) plus 4 per message, plus the tool schemas.
    """
    params = {"turns": LONG_TURNS, "context_window": LONG_WINDOW, "max_tokens": LONG_MAX_TOKENS}
    results = repeat(bench, systems, runs, "prompts", params)
    for runs_ in results.values():
        for result in runs_:
            requests = result.pop("requests")
            chat = [r for r in requests if not is_consolidation(r)]
            consolidation = [r for r in requests if is_consolidation(r)]
            result["prompt_tokens"] = [_prompt_tokens(r, counter) for r in chat]
            result["consolidation_calls"] = len(consolidation)
            result["consolidation_tokens"] = sum(_prompt_tokens(r, counter) for r in consolidation)
    budget = LONG_WINDOW - LONG_MAX_TOKENS - 1024
    row = row_maker("f", results)
    rows = [
        row(
            "f.mean",
            f"prompt tokens per turn, mean of {LONG_TURNS} turns",
            "tokens",
            lambda r: statistics.mean(r["prompt_tokens"]),
            0,
        ),
        row(
            "f.max",
            f"prompt tokens per turn, max (budget {budget:,})",
            "tokens",
            lambda r: max(r["prompt_tokens"]),
            0,
        ),
        row(
            "f.over",
            "turns whose prompt exceeded the budget",
            "turns",
            lambda r: sum(t > budget for t in r["prompt_tokens"]),
            0,
        ),
        row(
            "f.calls",
            "LLM calls spent on consolidation",
            "calls",
            lambda r: r["consolidation_calls"],
            0,
        ),
        row(
            "f.ctokens",
            "prompt tokens spent on consolidation",
            "tokens",
            lambda r: r["consolidation_tokens"],
            0,
        ),
        row(
            "f.total",
            f"all prompt tokens of the {LONG_TURNS} turns (chat + consolidation)",
            "tokens",
            lambda r: sum(r["prompt_tokens"]) + r["consolidation_tokens"],
            0,
        ),
    ]
    plot = {
        "budget": budget,
        **{name: runs_[0]["prompt_tokens"] for name, runs_ in results.items()},
    }
    return rows, plot


def _prompt_tokens(body: dict[str, Any], counter: Any) -> int:
    messages = body.get("messages") or []
    return sum(counter.count_message(m) for m in messages) + counter.count_tools(
        body.get("tools") or []
    )
