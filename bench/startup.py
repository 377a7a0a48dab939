"""Figure d: process start to first reply, `memgate chat -m` against `nanobot agent -m`.

Each system gets a workspace and config of its own; one untimed run first creates the workspace
files (as `memgate init` / nanobot's first start do) and warms the page cache. A timed run is the
wall time from spawning the console script to the reply appearing on its stdout, and to its exit.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import yaml

from bench.configs import memgate_config, nanobot_config
from bench.runner import Bench, System
from bench.stats import Row

MESSAGE = "hello from the benchmark"


def _command(system: System, root: Path, llm: str) -> list[str]:
    workspace = root / "workspace"
    if system.name == "memgate":
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump(memgate_config(workspace, llm)), encoding="utf-8")
        return [str(system.cli), "chat", "-m", MESSAGE, "--config", str(config)]
    config = root / "config.json"
    config.write_text(json.dumps(nanobot_config(workspace, llm)), encoding="utf-8")
    return [str(system.cli), "agent", "-m", MESSAGE, "--config", str(config), "--no-markdown"]


def _time_once(command: list[str], bench: Bench) -> tuple[float, float]:
    """Seconds from spawn to the reply on stdout, and to exit."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=bench.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    first = None
    for line in process.stdout:
        if first is None and f"echo: {MESSAGE}" in line:
            first = time.perf_counter() - started
    code = process.wait(timeout=60)
    ended = time.perf_counter() - started
    if code != 0 or first is None:
        error = process.stderr.read() if process.stderr else ""
        raise RuntimeError(f"{command[0]} exited {code} without the reply:\n{error[-2000:]}")
    return first, ended


def startup(bench: Bench, systems: list[System], runs: int) -> list[Row]:
    """d. Start to first reply and start to exit, `runs` timed runs per system after one untimed."""
    commands = {}
    for system in systems:
        root = bench.workdir(f"{system.name}-startup")
        commands[system.name] = _command(system, root, bench.llm.url)
        if system.name == "memgate":  # the workspace files `memgate init` writes
            subprocess.run(
                [str(system.cli), "init", "--config", commands["memgate"][-1]],
                env=bench.env,
                check=True,
                capture_output=True,
            )
        _time_once(commands[system.name], bench)
    first: dict[str, list[float]] = {s.name: [] for s in systems}
    exit_: dict[str, list[float]] = {s.name: [] for s in systems}
    for number in range(runs):
        for system in systems:
            print(f"  startup {system.name} run {number + 1}/{runs}", flush=True)
            reply, ended = _time_once(commands[system.name], bench)
            first[system.name].append(reply * 1000)
            exit_[system.name].append(ended * 1000)
    return [
        Row(
            "d.first",
            "d",
            "process start to first reply",
            "ms",
            first["memgate"],
            first["nanobot"],
            0,
        ),
        Row("d.exit", "d", "process start to exit", "ms", exit_["memgate"], exit_["nanobot"], 0),
    ]
