"""`memgate run` as a child process against the fake LLM and the fake Bot API.

The suites start, SIGKILL and SIGTERM the real service exactly as systemd would, and read what it
left on disk. Each start is forked from a warm interpreter (tests/forkserver.py) unless
MEMGATE_TEST_FORK=0. The config is written as JSON (which is YAML) with the secrets as `${VAR}` references
resolved from the child's environment, as an env file would provide them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import deep_merge, listen_port
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.forkserver import ForkedProcess, start_forked

API_KEY = "sk-resilience-4f7a9c2e8b1d6053"
SECRETS = {"OPENAI_API_KEY": API_KEY, "TELEGRAM_BOT_TOKEN": TOKEN}
# The part of the bot token that is secret (the digits before the colon are the bot's public id).
TOKEN_SECRET = TOKEN.split(":", 1)[1]
READY_WITHIN = 45.0  # seconds for a start on a loaded 2-core machine


async def until(check: Callable[[], bool], within: float, what: str, step: float = 0.05) -> None:
    """Poll `check` until it holds; fail naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}")
        await asyncio.sleep(step)


@dataclass
class Gateway:
    """One workspace served by successive `memgate run` processes (one at a time)."""

    root: Path
    llm: FakeLLM
    telegram: FakeTelegram
    settings: dict[str, Any] = field(default_factory=dict)  # merged over the base config
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the child
    process: asyncio.subprocess.Process | ForkedProcess | None = None
    starts: int = 0
    port: int = field(default_factory=listen_port)

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def log_path(self) -> Path:
        return self.root / "memgate.log"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def workspace(self) -> Path:
        return Path(self.config()["workspace"])

    @property
    def state_dir(self) -> Path:
        return Path(self.config()["state_dir"])

    def config(self) -> dict[str, Any]:
        base = {
            "workspace": str(self.root / "workspace"),
            "state_dir": str(self.root / "state"),
            "llm": {
                "base_url": self.llm.url,
                "api_key": "${OPENAI_API_KEY}",
                "max_retries": 0,
                "timeout": 10,
            },
            "memory": {"timeout": 10},
            "channels": {
                "telegram": {
                    "enabled": True,
                    "token": "${TELEGRAM_BOT_TOKEN}",
                    "allow_from": ["42"],
                    "base_url": self.telegram.url,
                    "base_file_url": self.telegram.file_url,
                }
            },
            "health": {"listen": f"127.0.0.1:{self.port}"},
            "shutdown_grace": 2,
        }
        return deep_merge(base, self.settings)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self, *, ready: bool = True) -> None:
        """Start `memgate run`; with `ready`, wait until Telegram is connected."""
        assert not self.alive, "the previous process is still running"
        self.root.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        self.config_path.write_text(json.dumps(self.config(), indent=2))
        self.starts += 1
        env = {
            **os.environ,
            **SECRETS,
            "MEMGATE_HOME": str(self.home),
            "HOME": str(self.home),
            **self.env,
        }
        args = ["run", "--config", str(self.config_path)]
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            log.flush()
            if os.environ.get("MEMGATE_TEST_FORK") == "0":
                self.process = await asyncio.create_subprocess_exec(
                    *(sys.executable, "-m", "gateway", *args),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                )
            else:  # forked from a warm interpreter (tests/forkserver.py): the same process
                stdin = os.open(os.devnull, os.O_RDONLY)
                try:
                    fd = log.fileno()
                    self.process = await start_forked(args, env, stdin, fd, fd)
                finally:
                    os.close(stdin)
        if ready:
            await self.wait_ready()

    async def health(self) -> dict[str, Any] | None:
        """The /healthz document, or None while the endpoint does not answer."""
        url = f"http://127.0.0.1:{self.port}/healthz"
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as client,
                client.get(url) as response,
            ):
                return json.loads(await response.text()) if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def wait_ready(self, within: float = READY_WITHIN) -> None:
        deadline = time.monotonic() + within
        while True:
            if not self.alive:
                raise AssertionError(f"memgate run exited early:\n{self.log()[-3000:]}")
            health = await self.health()
            if health and health["channels"]["telegram"]["connected"]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"memgate run not ready after {within:.0f}s")
            await asyncio.sleep(0.1)

    async def kill(self) -> None:
        """SIGKILL: no handler runs, no buffer is flushed."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def stop(self, within: float = 60) -> int:
        """SIGTERM and wait for the exit status."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), within)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def close(self) -> None:
        if self.alive:
            await self.kill()


# -- reading what a run left on disk -------------------------------------------------------------
@dataclass
class SessionFile:
    """A session file read strictly: every complete line must be a JSON object."""

    path: Path
    records: list[dict[str, Any]]
    torn: bytes  # bytes after the last newline (a write cut short by a kill)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [r for r in self.records if isinstance(r.get("role"), str)]

    def texts(self, role: str) -> list[str]:
        return [str(m.get("content")) for m in self.messages if m["role"] == role]


def read_session(path: Path) -> SessionFile:
    """Parse a session file; raise ValueError naming the line that is not a JSON object."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    records = []
    for number, line in enumerate(data[:end].split(b"\n")[:-1], start=1):
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path.name} line {number} does not parse: {exc}") from exc
        if not isinstance(record, dict):
            raise ValueError(f"{path.name} line {number} is not an object")
        records.append(record)
    if records and records[0].get("_type") != "metadata":
        raise ValueError(f"{path.name} does not start with its metadata line")
    return SessionFile(path, records, data[end:])


def session_paths(workspace: Path) -> list[Path]:
    """Every session file, live and archived."""
    root = workspace / "sessions"
    return sorted(root.rglob("*.jsonl")) if root.is_dir() else []


def read_sessions(workspace: Path) -> list[SessionFile]:
    return [read_session(path) for path in session_paths(workspace)]


def workspace_files(workspace: Path) -> list[Path]:
    return sorted(p for p in workspace.rglob("*") if p.is_file() and not p.is_symlink())
