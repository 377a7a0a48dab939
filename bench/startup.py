"""Figure d: process start to first reply, `memgate chat -m` against `nanobot agent -m`.

Each system gets a workspace and config of its own; one untimed run first creates the workspace
files (as `memgate init` / nanobot's first start do) and warms the page cache. A timed run is the
wall time from spawning the console script to the reply appearing on its stdout, and to its exit.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from bench.configs import memgate_config, nanobot_config
from bench.runner import Bench, System
from bench.stats import Row
from bench.venvs import REPO
from tests.fakes.telegram_api import TOKEN as TELEGRAM_TOKEN

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


def time_once(
    command: list[str], bench: Bench, within: float = 60, message: str = MESSAGE
) -> tuple[float, float]:
    """Seconds from spawn to the reply to `message` on stdout, and to exit (within `within` s)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=bench.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    first = None
    for line in process.stdout:
        if first is None and f"echo: {message}" in line:
            first = time.perf_counter() - started
    code = process.wait(timeout=within)
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
        time_once(commands[system.name], bench)
    first: dict[str, list[float]] = {s.name: [] for s in systems}
    exit_: dict[str, list[float]] = {s.name: [] for s in systems}
    for number in range(runs):
        for system in systems:
            print(f"  startup {system.name} run {number + 1}/{runs}", flush=True)
            reply, ended = time_once(commands[system.name], bench)
            first[system.name].append(reply * 1000)
            exit_[system.name].append(ended * 1000)
    attached = _attached(bench, systems, commands, runs) if "memgate" in commands else []
    sdk = _sdk_import(bench, systems, runs) if "memgate" in commands else []
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
        Row(
            "d.attached",
            "d",
            "process start to first reply, attached to a running `memgate run`",
            "ms",
            attached,
            [],
            0,
        ),
        Row(
            "d.sdk",
            "d",
            "memgate's interpreter importing the openai SDK alone, start to exit",
            "ms",
            sdk,
            [],
            0,
        ),
    ]


def _sdk_import(bench: Bench, systems: list[System], runs: int) -> list[float]:
    """The floor under an in-process `memgate chat -m`: its interpreter starting, importing the
    openai SDK (with the cyclic collector off, as `memgate chat` imports) and exiting; ms per run."""
    memgate = next(s for s in systems if s.name == "memgate")
    command = [str(memgate.python), "-c", "import gc; gc.disable(); import openai"]
    subprocess.run(command, env=bench.env, check=True)  # untimed, as the others
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=bench.env, check=True)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _attached(
    bench: Bench, systems: list[System], commands: dict[str, list[str]], runs: int
) -> list[float]:
    """`memgate chat -m` beside a running service (its Telegram channel on the test fake, in a
    process of its own), which answers through the service's agent: ms to the reply per run."""
    memgate = next(s for s in systems if s.name == "memgate")
    root = Path(commands["memgate"][-1]).parent
    config = yaml.safe_load((root / "config.yaml").read_text(encoding="utf-8"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    telegram = subprocess.Popen(
        [str(memgate.python), "-m", "tests.fakes.telegram_api", "--port", str(port)],
        cwd=REPO,
        env=bench.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    processes: list[subprocess.Popen[Any]] = [telegram]
    try:
        assert telegram.stdout is not None
        telegram.stdout.readline()  # its "listening" line
        config["channels"] = {
            "telegram": {
                "enabled": True,
                "token": TELEGRAM_TOKEN,
                "base_url": f"http://127.0.0.1:{port}/bot",
                "allow_from": ["1"],
            }
        }
        path = root / "attached.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        service = subprocess.Popen(
            [str(memgate.cli), "run", "--config", str(path)],
            env=bench.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(service)
        socket_file = Path(config["state_dir"]) / "control.sock"
        deadline = time.monotonic() + 60
        while not socket_file.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("memgate run did not open its control socket")
            time.sleep(0.05)
        command = [*commands["memgate"][:-1], str(path)]
        time_once(command, bench)  # untimed, as the others
        times = []
        for number in range(runs):
            print(f"  startup memgate attached run {number + 1}/{runs}", flush=True)
            times.append(time_once(command, bench)[0] * 1000)
        return times
    finally:
        for process in reversed(processes):  # the service first, while Telegram still answers
            process.terminate()
            process.wait(30)
