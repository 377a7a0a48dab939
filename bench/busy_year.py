"""Figure h: a year of a busy bot, memgate alone.

The data (bench.busy_data) is written once per bench run in the bench's scratch folder. Then, per
run, the real `memgate run` with its Telegram channel on the fake Bot API (a process of its own) and
the bench's fake LLM: the first message is queued before the spawn, so "start to first reply" runs
from spawning the console script to the fake receiving the answer; then one message in each of
1,000 other chats. The same runs on an empty workspace tell what the history itself costs. Memory
search and one chat's consolidation are timed in a driver process of their own
(`python -m bench.busy_year search|consolidate`).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from bench import busy_data
from bench.configs import memgate_config
from bench.fake_telegram import FakeTelegramProcess
from bench.protocol import Run, run_driver
from bench.runner import Bench
from bench.stats import Row, percentile
from bench.venvs import REPO, memgate_python
from tests.fakes.telegram_api import TOKEN as TELEGRAM_TOKEN

TALKING_CHATS = 1_000
QUERIES = 200


def _status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status (Linux only)")


def _serve_once(
    bench: Bench, workspace: Path, state_dir: Path, chats: list[int], label: str, number: int
) -> dict[str, float]:
    """One `memgate run`: start to the first reply in chats[0], then one turn in each of the next
    TALKING_CHATS chats; RSS at both points."""
    python = memgate_python()
    telegram = FakeTelegramProcess(python, bench.env)
    service: subprocess.Popen[bytes] | None = None
    try:
        config = memgate_config(workspace, bench.llm.url)
        config["state_dir"] = str(state_dir)
        config["channels"] = {
            "telegram": {
                "enabled": True,
                "token": TELEGRAM_TOKEN,
                "base_url": f"{telegram.root}/bot",
                "allow_from": ["*"],
            }
        }
        path = workspace.parent / f"{label}.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        log = (workspace.parent / f"{label}.log").open("ab")
        ids = itertools.count(number * 1_000_000)
        telegram.send(chats[0], "what did we decide about the museum tickets?", next(ids))
        (state_dir / "control.sock").unlink(missing_ok=True)  # left by a killed run, if any
        started = time.perf_counter()
        service = subprocess.Popen(
            [str(python.parent / "memgate"), "run", "--config", str(path)],
            env=bench.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        ready = _wait_ready(state_dir / "control.sock", service) - started
        first = _wait_sent(telegram, service, 1, poll=0.005) - started
        first_mb = _status_mb(service.pid, "VmRSS")
        others = chats[1 : TALKING_CHATS + 1]
        began = time.perf_counter()
        for chat in others:
            telegram.send(chat, f"hello again from chat {chat}", next(ids))
        wall = _wait_sent(telegram, service, 1 + len(others), poll=0.1) - began
        result = {
            "ready_s": ready,
            "first_s": first,
            "first_mb": first_mb,
            "talked_mb": _status_mb(service.pid, "VmRSS"),
            "peak_mb": _status_mb(service.pid, "VmHWM"),
            "talked_s": wall,
        }
        service.send_signal(signal.SIGTERM)
        service.wait(60)
        return result
    finally:
        if service is not None and service.poll() is None:
            service.kill()
            service.wait(10)
        telegram.close()


def _wait_ready(socket_file: Path, service: subprocess.Popen[bytes]) -> float:
    """perf_counter() once the service has opened its control socket (it has built its runtime
    and starts its channels)."""
    deadline = time.monotonic() + 120
    while not socket_file.exists():
        if service.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("memgate run did not open its control socket")
        time.sleep(0.005)
    return time.perf_counter()


def _wait_sent(
    telegram: FakeTelegramProcess, service: subprocess.Popen[bytes], count: int, poll: float
) -> float:
    """perf_counter() once the fake has received `count` answers."""
    deadline = time.monotonic() + 600
    while len({(m["chat_id"], m["text"]) for m in telegram.sent()}) < count:
        if service.poll() is not None:
            raise RuntimeError(
                f"memgate run exited {service.returncode} before its answers (see its log beside"
                " its config)"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"memgate run sent fewer than {count} answers in 600 s")
        time.sleep(poll)
    return time.perf_counter()


def _drive(bench: Bench, part: str, params: dict[str, Any]) -> Any:
    """A part timed in a fresh memgate process (bench.runner's driver protocol)."""
    workdir = bench.workdir(f"busy-{part}")
    command = [str(memgate_python()), "-m", "bench.busy_year", part, "--llm", bench.llm.url]
    command += ["--workdir", str(workdir), "--params", json.dumps(params)]
    done = subprocess.run(command, cwd=REPO, env=bench.env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"busy_year {part} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def busy_year(bench: Bench, runs: int) -> list[Row]:
    """h. The figure's rows (memgate only)."""
    began = time.perf_counter()
    year = busy_data.build(bench.workdir("busy-year"))
    built = time.perf_counter() - began
    parts = ", ".join(f"{k} {v:.0f} s" for k, v in year.seconds.items())
    print(
        f"  h data: {sum(year.sizes):,} messages in {len(year.sizes):,} sessions "
        f"({len(year.chats):,} live chats), "
        f"{year.bytes_on_disk / 1e6:,.0f} MB, built in {built:.0f} s ({parts})",
        flush=True,
    )
    empty = bench.workdir("busy-empty")
    busy_data.write_memory_files(empty / "workspace")
    served: dict[str, list[dict[str, float]]] = {"year": [], "empty": []}
    for number in range(runs):
        for label, workspace, state in (
            ("year", year.workspace, year.state_dir),
            ("empty", empty / "workspace", empty / "state"),
        ):
            print(f"  h memgate run, {label} workspace, run {number + 1}/{runs}", flush=True)
            result = _serve_once(bench, workspace, state, year.chats, label, number + 1)
            served[label].append(result)
    data = {"workspace": str(year.workspace), "state_dir": str(year.state_dir)}
    searched = [_drive(bench, "search", data) for _ in range(runs)]
    consolidated = [_drive(bench, "consolidate", {**data, "key": f"telegram:{year.chats[0]}"})]
    gc.collect()

    def row(key: str, metric: str, unit: str, values: list[float], digits: int = 1) -> Row:
        return Row(f"h.{key}", "h", metric, unit, values, [], digits)

    year_runs, empty_runs = served["year"], served["empty"]
    talked = f"after one turn in each of {TALKING_CHATS:,} more chats"
    return [
        row(
            "first",
            f"`memgate run` start to first reply (a chat of {year.sizes[0]:,} messages)",
            "ms",
            [r["first_s"] * 1000 for r in year_runs],
            0,
        ),
        row(
            "first.empty",
            "the same on an empty workspace",
            "ms",
            [r["first_s"] * 1000 for r in empty_runs],
            0,
        ),
        row(
            "ready",
            "`memgate run` start to its runtime built (control socket open)",
            "ms",
            [r["ready_s"] * 1000 for r in year_runs],
            0,
        ),
        row(
            "ready.empty",
            "the same on an empty workspace",
            "ms",
            [r["ready_s"] * 1000 for r in empty_runs],
            0,
        ),
        row(
            "rss.first",
            "RSS after start and the first reply",
            "MB",
            [r["first_mb"] for r in year_runs],
        ),
        row(
            "rss.first.empty",
            "the same on an empty workspace",
            "MB",
            [r["first_mb"] for r in empty_runs],
        ),
        row("rss.talked", f"RSS {talked}", "MB", [r["talked_mb"] for r in year_runs]),
        row(
            "rss.talked.empty",
            "the same on an empty workspace",
            "MB",
            [r["talked_mb"] for r in empty_runs],
        ),
        row("peak", f"peak RSS (VmHWM) {talked}", "MB", [r["peak_mb"] for r in year_runs]),
        row(
            "talked",
            f"time for those {TALKING_CHATS:,} turns",
            "s",
            [r["talked_s"] for r in year_runs],
        ),
        row(
            "search.first",
            "memory search, first query after those turns (indexes what they added)",
            "ms",
            [r["first_ms"] for r in searched],
            0,
        ),
        row(
            "search.p50",
            f"memory search p50 over {QUERIES} queries (refresh included)",
            "ms",
            [r["p50_ms"] for r in searched],
            1,
        ),
        row(
            "search.p99",
            f"memory search p99 over {QUERIES} queries (refresh included)",
            "ms",
            [r["p99_ms"] for r in searched],
            1,
        ),
        row(
            "search.refresh",
            "the refresh before a search alone, nothing new, p50",
            "ms",
            [r["refresh_ms"] for r in searched],
            1,
        ),
        row(
            "search.full_refresh",
            "a refresh of every file, nothing new, p50 (memgate memory search; once a minute)",
            "ms",
            [r["full_refresh_ms"] for r in searched],
            1,
        ),
        row(
            "consolidate",
            f"consolidation of the biggest chat's pending messages ({consolidated[0]['messages']})",
            "ms",
            [r["ms"] for r in consolidated],
            0,
        ),
        row("build", "generating the year (files, session index, search index)", "s", [built], 0),
    ]


# -- the driver side: run by memgate's venv as `python -m bench.busy_year PART` -----------------------
async def search(run: Run) -> dict[str, Any]:
    """Memory search over the whole year, built as the runtime builds the agent's tool: from the
    config, told what the process's session store writes (nothing here, so after the first
    query's full scan each refresh looks at memory/ alone). The refresh alone is timed both ways:
    as a search does it, and whole, as `memgate memory search` and the once-a-minute scan do."""
    from bench.search_bench import Corpus
    from gateway.config.file import parse_config
    from gateway.tools.search import open_search
    from memory.search.touched import TouchedFiles

    words = Corpus(busy_data.SEED).words
    queries = []
    for i in range(QUERIES):
        kind = i % 5
        if kind == 0:
            queries.append(words[-1 - i])  # rare
        elif kind == 1:
            queries.append(words[i])  # common
        elif kind == 2:
            queries.append(f"{words[i + 5]} {words[i * 7 % 2000 + 40]}")
        elif kind == 3:
            queries.append(words[-3 - i][:3] + "*")
        else:
            queries.append("猫咖啡"[i % 3] + "天气下雨"[i % 4])
    raw = memgate_config(Path(run.params["workspace"]), run.llm)
    raw["state_dir"] = run.params["state_dir"]
    config = parse_config(raw, run.workdir / "config.yaml", env={})
    async with open_search(config, TouchedFiles()) as found:
        began = time.perf_counter()
        await found.search("museum tickets")
        first = (time.perf_counter() - began) * 1000
        samples = []
        for query in queries:
            began = time.perf_counter()
            await found.search(query)
            samples.append((time.perf_counter() - began) * 1000)
        refresh, full = [], []
        for _ in range(20):
            began = time.perf_counter()
            await asyncio.to_thread(found.index.refresh, full=False)
            refresh.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            await found.refresh()
            full.append((time.perf_counter() - began) * 1000)
    return {
        "first_ms": first,
        "p50_ms": percentile(samples, 50),
        "p99_ms": percentile(samples, 99),
        "refresh_ms": statistics.median(refresh),
        "full_refresh_ms": statistics.median(full),
    }


async def consolidate(run: Run) -> dict[str, Any]:
    """One chat's pending messages consolidated now, as `memgate memory consolidate KEY` does."""
    from gateway.config.file import parse_config
    from gateway.service.app import open_runtime
    from memory.consolidation.consolidator import Job

    workspace = Path(run.params["workspace"])
    raw = memgate_config(workspace, run.llm)
    raw["state_dir"] = run.params["state_dir"]
    key = run.params["key"]
    async with open_runtime(parse_config(raw, run.workdir / "config.yaml", env={})) as runtime:
        session = await runtime.sessions.get(key)
        pending = session.unconsolidated
        began = time.perf_counter()
        runtime.consolidator.enqueue(Job(key, key, everything=True))
        await runtime.consolidator.wait_idle()
        took = (time.perf_counter() - began) * 1000
        left = session.unconsolidated
    return {"ms": took, "messages": pending - left}


if __name__ == "__main__":
    run_driver({"search": search, "consolidate": consolidate})
