"""The Status page: the channels, MCP servers and embeddings as the running service reports them,
the consolidation queue and its failures, and small charts of turns and tokens per day, counted
from the session files (the live ones, and archives written to within the period)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway.console.html import e, table
from gateway.console.view import Console
from memory.consolidation.failures import FAILURE_REPORT, read_failure_report, read_raw_endings
from memory.sessions.file import read_session
from memory.sessions.store import SessionStore
from memory.tokens import TokenCounter

DAYS = 14


Tally = tuple[Counter[date], Counter[date]]  # turns and tokens by day, of one session file


def daily_figures(
    store: SessionStore,
    counter: TokenCounter,
    today: date,
    known: dict[Path, tuple[tuple[int, float], Tally]] | None = None,
) -> tuple[list[date], Counter[date], Counter[date]]:
    """The last DAYS days, and per day the turns (messages from people) and the tokens of every
    message stored, as the offline tokenizer counts them. `known` keeps each file's tally by its
    size and time, so a page shown again reads and counts only the files that changed."""
    known = {} if known is None else known
    days = [today - timedelta(days=n) for n in range(DAYS - 1, -1, -1)]
    since = datetime.combine(days[0], datetime.min.time()).timestamp()
    keys = store.keys()  # the files on disk
    paths = [store.path_for(key) for key in keys]
    paths += [p for p in store.archived_paths() if _modified(p) >= since]
    turns: Counter[date] = Counter()
    tokens: Counter[date] = Counter()
    for path in paths:
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue  # archived or renamed meanwhile
        mark = (stat.st_size, stat.st_mtime)
        if path not in known or known[path][0] != mark:
            known[path] = (mark, _tally(path, counter))
        file_turns, file_tokens = known[path][1]
        turns.update({day: n for day, n in file_turns.items() if day >= days[0]})
        tokens.update({day: n for day, n in file_tokens.items() if day >= days[0]})
    return days, turns, tokens


def _tally(path: Path, counter: TokenCounter) -> Tally:
    turns: Counter[date] = Counter()
    tokens: Counter[date] = Counter()
    for message in read_session(path).messages:
        try:
            day = date.fromisoformat(str(message.get("timestamp", ""))[:10])
        except ValueError:
            continue
        turns[day] += message.get("role") == "user"
        tokens[day] += counter.count_message(message)
    return turns, tokens


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def bar_chart(title: str, days: list[date], values: Counter[date]) -> str:
    """Bars drawn as SVG shapes (no script, no style attribute: the CSP allows neither)."""
    width, height, bar = 420, 120, 420 // len(days)
    top = max(values.values(), default=0) or 1
    shapes = []
    for index, day in enumerate(days):
        value = values.get(day, 0)
        tall = round((height - 30) * value / top)
        x = index * bar
        shapes.append(
            f'<rect x="{x + 2}" y="{height - 18 - tall}" width="{bar - 4}" height="{tall}">'
            f"<title>{day.isoformat()}: {value:,}</title></rect>"
        )
        if index % 2 == 0 or len(days) <= 7:
            shapes.append(f'<text x="{x + 1}" y="{height - 5}">{day.strftime("%d/%m")}</text>')
    return (
        f"<figure><figcaption>{e(title)} (most: {top:,})</figcaption>"
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{e(title)}">'
        + "".join(shapes)
        + "</svg></figure>"
    )


def routes(console: Console) -> list[web.RouteDef]:
    sources = console.sources
    config = sources.config
    store = SessionStore(config.workspace / "sessions", config.tz)
    known: dict[Path, tuple[tuple[int, float], Tally]] = {}

    async def show(request: web.Request) -> web.Response:
        live = sources.live()
        report = config.state_dir / FAILURE_REPORT
        failing = await asyncio.to_thread(read_failure_report, report)
        raw = await asyncio.to_thread(read_raw_endings, report)
        today = datetime.now(config.tz).date()
        days, turns, tokens = await asyncio.to_thread(
            daily_figures, store, sources.counter, today, known
        )
        body = (
            "<h2>Channels</h2>"
            + table(
                ["channel", "state"],
                (
                    [e(name), "connected" if up else "<strong>down</strong>"]
                    for name, up in live.get("channels", {}).items()
                ),
                "No channel runs in this gateway.",
            )
            + "<h2>MCP servers</h2>"
            + _servers(live.get("mcp", {}))
            + f"<p>Embeddings: {e(live.get('embeddings', {}).get('state', 'off'))}</p>"
            + "<h2>Consolidation</h2>"
            + f"<p>{e(live.get('queue', 0))} job(s) queued.</p>"
            + _failures(failing, raw)
            + "<h2>Activity, last two weeks</h2>"
            + '<div class="columns">'
            + bar_chart("Turns per day", days, turns)
            + bar_chart("Tokens per day", days, tokens)
            + "</div>"
        )
        return console.respond(request, "Status", body)

    return [web.get("/status", show)]


def _servers(servers: dict[str, dict[str, Any]]) -> str:
    return table(
        ["server", "state", "tools", "error"],
        (
            [e(name), e(s.get("state", "?")), e(s.get("tools", 0)), e(s.get("error", ""))]
            for name, s in servers.items()
        ),
        "No MCP servers are configured.",
    )


def _failures(failing: dict[str, dict[str, Any]], raw: dict[str, dict[str, Any]]) -> str:
    rows = [
        [e(key), e(f"{entry.get('failures', '?')} failure(s)"), e(entry.get("error", ""))]
        for key, entry in sorted(failing.items())
    ]
    rows += [
        [e(key), e(f"ended raw ({entry.get('chunks', '?')} chunk(s))"), e(entry.get("error", ""))]
        for key, entry in sorted(raw.items())
    ]
    return table(["session", "state", "last error"], rows, "No failures reported.")
