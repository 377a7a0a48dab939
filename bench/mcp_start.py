"""Figure i: what configured MCP servers cost the start, memgate alone (nanobot has no such mode).

`memgate chat -m` with four MCP servers (three of the test's fake stdio server, one `sleep` that
never answers) against the same config without them, runs alternating, after one untimed run of
each (the one that learns the servers' tools, as a first chat does). Then `memgate run` with its
Telegram channel on the fake Bot API (a process of its own) and one hanging MCP server: from
spawning the console script to `/healthz` answering 200, and to the fake receiving the answer to a
message queued before the spawn; then SIGTERM to exit. The same `memgate run` without the server
beside it. `python -m bench --only i` runs this figure alone.
"""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.configs import memgate_config
from bench.fake_telegram import FakeTelegramProcess, free_port
from bench.runner import Bench, System
from bench.startup import time_once
from bench.stats import Row
from bench.venvs import REPO
from tests.fakes.telegram_api import TOKEN as TELEGRAM_TOKEN

MESSAGE = "hello from the MCP benchmark"
HANG_TIMEOUT = 3  # the hanging server's start_timeout: what the learning run waits once


def _servers(python: Path) -> dict[str, Any]:
    """Four servers: three answering, one that never says a word."""
    fake = {"command": str(python), "args": ["-m", "tests.fakes.mcp_server", "stdio"]}
    servers: dict[str, Any] = {name: {**fake, "cwd": str(REPO)} for name in ("one", "two", "three")}
    servers["hang"] = {"command": "sleep", "args": ["3600"], "start_timeout": HANG_TIMEOUT}
    return servers


def _chat(bench: Bench, memgate: System, runs: int) -> dict[str, list[float]]:
    """chat -m without and with the servers: ms to the reply and to exit, per run."""
    commands = {}
    for label, tools in (("plain", {}), ("mcp", {"mcp_servers": _servers(memgate.python)})):
        root = bench.workdir(f"mcp-chat-{label}")
        config = memgate_config(root / "workspace", bench.llm.url)
        if tools:
            config["tools"] = tools
        path = root / "config.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        subprocess.run(
            [str(memgate.cli), "init", "--config", str(path)],
            env=bench.env,
            check=True,
            capture_output=True,
        )
        commands[label] = [str(memgate.cli), "chat", "-m", MESSAGE, "--config", str(path)]
        # Untimed: the workspace, and what the servers list.
        time_once(commands[label], bench, within=120, message=MESSAGE)
    times: dict[str, list[float]] = {}
    for number in range(runs):
        for label, command in commands.items():
            print(f"  mcp chat -m {label} run {number + 1}/{runs}", flush=True)
            reply, ended = time_once(command, bench, within=120, message=MESSAGE)
            times.setdefault(f"{label}.first", []).append(reply * 1000)
            times.setdefault(f"{label}.exit", []).append(ended * 1000)
    times["ratio"] = [
        mcp / plain for mcp, plain in zip(times["mcp.exit"], times["plain.exit"], strict=True)
    ]
    return times


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False  # not listening yet, or 503


def _serve_once(bench: Bench, memgate: System, with_mcp: bool) -> dict[str, float]:
    """One `memgate run`: ms from spawn to healthy, to the queued message's answer, and from
    SIGTERM to exit."""
    telegram = FakeTelegramProcess(memgate.python, bench.env)
    service: subprocess.Popen[bytes] | None = None
    try:
        root = bench.workdir("mcp-run")
        config = memgate_config(root / "workspace", bench.llm.url)
        port = free_port()
        config["health"] = {"listen": f"127.0.0.1:{port}"}
        config["channels"] = {
            "telegram": {
                "enabled": True,
                "token": TELEGRAM_TOKEN,
                "base_url": f"{telegram.root}/bot",
                "allow_from": ["*"],
            }
        }
        if with_mcp:  # the default start_timeout (20 s): it hangs the whole measurement
            config["tools"] = {"mcp_servers": {"hang": {"command": "sleep", "args": ["3600"]}}}
        path = root / "config.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        telegram.send(1, MESSAGE)
        started = time.perf_counter()
        service = subprocess.Popen(
            [str(memgate.cli), "run", "--config", str(path)],
            env=bench.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}/healthz"
        healthy = answered = None
        deadline = time.monotonic() + 120
        while healthy is None or answered is None:
            if service.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"memgate run exited {service.returncode} or never answered")
            now = time.perf_counter()
            if healthy is None and _healthy(url):
                healthy = now - started
            if answered is None and telegram.sent():
                answered = now - started
            time.sleep(0.005)
        stopping = time.perf_counter()
        service.send_signal(signal.SIGTERM)
        service.wait(60)
        return {
            "healthy": healthy * 1000,
            "reply": answered * 1000,
            "stop": (time.perf_counter() - stopping) * 1000,
        }
    finally:
        if service is not None and service.poll() is None:
            service.kill()
            service.wait(10)
        telegram.close()


def mcp_start(bench: Bench, systems: list[System], runs: int) -> list[Row]:
    """i. The figure's rows (memgate only)."""
    memgate = next(s for s in systems if s.name == "memgate")
    chat = _chat(bench, memgate, runs)
    served: dict[str, list[float]] = {}
    for number in range(runs):
        for with_mcp in (False, True):
            label = "mcp" if with_mcp else "plain"
            print(f"  mcp memgate run {label} run {number + 1}/{runs}", flush=True)
            for key, value in _serve_once(bench, memgate, with_mcp).items():
                served.setdefault(f"{label}.{key}", []).append(value)

    def row(key: str, metric: str, unit: str, values: list[float], digits: int = 0) -> Row:
        return Row(key, "i", metric, unit, values, [], digits)

    return [
        row("i.chat.plain", "`chat -m` start to exit, no MCP server", "ms", chat["plain.exit"]),
        row(
            "i.chat.mcp",
            "`chat -m` start to exit, four MCP servers (one hanging)",
            "ms",
            chat["mcp.exit"],
        ),
        row("i.chat.first", "`chat -m` start to reply, four MCP servers", "ms", chat["mcp.first"]),
        row(
            "i.chat.ratio", "`chat -m` with the servers ÷ without (per run)", "×", chat["ratio"], 2
        ),
        row(
            "i.run.healthy.plain",
            "`memgate run` start to healthy, no MCP server",
            "ms",
            served["plain.healthy"],
        ),
        row(
            "i.run.reply.plain",
            "`memgate run` start to a Telegram answer, no MCP server",
            "ms",
            served["plain.reply"],
        ),
        row(
            "i.run.healthy",
            "`memgate run` start to healthy, a hanging MCP server",
            "ms",
            served["mcp.healthy"],
        ),
        row(
            "i.run.reply",
            "`memgate run` start to a Telegram answer, a hanging MCP server",
            "ms",
            served["mcp.reply"],
        ),
        row(
            "i.run.stop.plain",
            "`memgate run` SIGTERM to exit, no MCP server",
            "ms",
            served["plain.stop"],
        ),
        row(
            "i.run.stop",
            "`memgate run` SIGTERM to exit, a hanging MCP server",
            "ms",
            served["mcp.stop"],
        ),
    ]
