"""Shared fixtures: the fake LLM server on loopback, configs and the real runtime under tmp_path."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import pty
import random
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.bus import InboundMessage
from gateway.config.file import parse_config
from gateway.config.models import Config
from gateway.llm.provider import OpenAIProvider
from gateway.service.app import Runtime, open_runtime
from gateway.service.control import request
from tests.fakes import discord_api
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm import FakeLLM, start_fake_llm
from tests.fakes.telegram_api import BOT, TOKEN, FakeTelegram, start_fake_telegram
from tests.fakes.web import FakeSearch, FakeSite, start_fake_search, start_fake_site
from tests.forkserver import run_forked
from tests.synapse import Synapse


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: one and a half workers a core (3 on 2). Much of a test's time is spent waiting
    (on child processes, retries, timeouts), which a worker more than cores fills with work.
    PYTEST_XDIST_AUTO_NUM_WORKERS, when set, still decides."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return max(1, len(os.sched_getaffinity(0)) * 3 // 2)


@pytest.fixture(autouse=True)
def _offline_tiktoken(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test starts with an empty tiktoken cache, as on a fresh offline machine."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path_factory.mktemp("tiktoken-cache")))


@pytest.fixture
def no_vocabulary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No vocabulary to be had: an empty cache, a corrupt bundled copy, no network, none built."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("memory.tokens._bundled", lambda name: b"corrupted")
    monkeypatch.setattr("memory.tokens._encodings", {})  # none built yet in this process

    def no_network(blobpath: str) -> bytes:
        raise ConnectionError(f"no route to {blobpath}")

    monkeypatch.setattr("tiktoken.load.read_file", no_network)


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    """A fake OpenAI-compatible server on 127.0.0.1; `fake_llm.url` is its base URL."""
    fake, runner = await start_fake_llm()
    try:
        yield fake
    finally:
        await runner.cleanup()


@pytest.fixture
async def provider(fake_llm: FakeLLM) -> AsyncIterator[OpenAIProvider]:
    """The chat provider on the fake LLM, without retries."""
    chat = OpenAIProvider(base_url=fake_llm.url, api_key="sk-test-key", model="m", max_retries=0)
    try:
        yield chat
    finally:
        await chat.close()


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    """A fake Telegram Bot API on 127.0.0.1 (it outlives every memgate process of a test)."""
    fake, runner = await start_fake_telegram()
    try:
        yield fake
    finally:
        await runner.cleanup()


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    """A fake Discord REST API and gateway on 127.0.0.1, serving the standard test guild."""
    fake, runner = await discord_api.start_fake_discord()
    fake.guilds.append(discord_api.standard_guild())
    try:
        yield fake
    finally:
        await discord_api.stop_fake_discord(fake, runner)


@pytest.fixture
async def fake_site() -> AsyncIterator[FakeSite]:
    """A fake web site on 127.0.0.1 (an article, a PDF, JSON, redirects, huge and endless pages)."""
    fake, runner = await start_fake_site()
    try:
        yield fake
    finally:
        await runner.cleanup()


@pytest.fixture
async def fake_search() -> AsyncIterator[FakeSearch]:
    """Fake Brave, SearXNG and Tavily search APIs on 127.0.0.1."""
    fake, runner = await start_fake_search()
    try:
        yield fake
    finally:
        await runner.cleanup()


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    """A real Synapse homeserver on 127.0.0.1 (tests/synapse.py), one per worker: its start
    takes seconds, and each test makes accounts and rooms of its own in it."""
    server = Synapse(tmp_path_factory.mktemp("synapse"), listen_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where connections are refused for the whole test: bound and held but
    never listening, so no server of a parallel worker can be given it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


_PORT_BLOCK = 400  # ports per xdist worker, from 20000 up: 30 workers fit below 32768
_next_port = itertools.count(random.randrange(_PORT_BLOCK))


def listen_port() -> int:
    """A free port on 127.0.0.1 for a child process to listen on (`health.listen`).

    Below the kernel's ephemeral range, so no socket bound to port 0 (every fake server) or
    connecting out is given it before the child binds it; and in a block of its own per xdist
    worker, so two workers never hand out the same one.
    """
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    first = 20000 + worker * _PORT_BLOCK
    for _ in range(_PORT_BLOCK):
        port = first + next(_next_port) % _PORT_BLOCK
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # taken by something else on this machine: try the next
                continue
        return port
    raise RuntimeError(f"no free port in {first}-{first + _PORT_BLOCK - 1}")


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def build_config(workspace: Path, llm_url: str, overrides: dict[str, Any] | None = None) -> Config:
    """A validated Config for tests: the fake LLM, no retries, a short timeout."""
    raw = {
        "workspace": str(workspace),
        "state_dir": str(workspace.parent / "state"),
        "llm": {
            "base_url": llm_url,
            "api_key": "sk-test-secret-key-0123456789",
            "model": "gpt-4o-mini",
            "timeout": 5,
            "max_retries": 0,
        },
    }
    return parse_config(deep_merge(raw, overrides or {}), workspace.parent / "config.yaml", env={})


def telegram_inbox_pending(state_dir: Path) -> set[int]:
    """Update ids the Telegram inbox would replay: journaled, with no done line after them.

    The channel writes a reply's done line once its send is over, so an empty set means no
    reply of these updates can still be sent (again).
    """
    path = state_dir / f"telegram-{BOT['id']}-inbox.jsonl"
    pending: set[int] = set()
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        if "done" in record:
            pending.discard(record["done"])
        elif "update" in record:  # not the lines that note a reply's parts or messages
            pending.add(record["update"]["update_id"])
    return pending


async def wait_for_log(path: Path, needle: str, count: int = 1, within: float = 30) -> str:
    """Until the log file at `path` holds `needle` `count` times (what a child process exposes)."""
    async with asyncio.timeout(within):
        # Polling, because a log file has no event to await.
        while (text := await asyncio.to_thread(path.read_text)).count(needle) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return text


RuntimeFactory = Callable[..., AbstractAsyncContextManager[Runtime]]


@pytest.fixture
def make_runtime(tmp_path: Path, fake_llm: FakeLLM) -> RuntimeFactory:
    """Build the real runtime (agent, sessions, memory) on tmp_path/workspace against the fake LLM.

    Call it again for a "fresh process" on the same workspace; pass config overrides as a dict.
    """

    def factory(overrides: dict[str, Any] | None = None) -> AbstractAsyncContextManager[Runtime]:
        return open_runtime(build_config(tmp_path / "workspace", fake_llm.url, overrides))

    return factory


@pytest.fixture
async def runtime(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    """The real runtime with default settings."""
    async with make_runtime() as built:
        yield built


def inbound(text: str, chat_id: str = "42", channel: str = "test", **fields: Any) -> InboundMessage:
    """A message as a channel would hand it to the agent; from the owner unless told otherwise."""
    return InboundMessage(
        channel=channel,
        chat_id=chat_id,
        sender_id=fields.pop("sender_id", "7"),
        sender_is_owner=fields.pop("sender_is_owner", True),
        text=text,
        **fields,
    )


class ManualClock:
    """Time that moves only when the consolidator waits (or the test says so).

    The scheduler's waits (`sleep_until`) end only when the test calls `advance()` past their
    time, or when their wake event is set; `asleep` holds the times they are waiting for, so a
    test can wait until the scheduler is idle before it moves time.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.waits: list[float] = []
        self.asleep: list[float | None] = []
        # Replaced on every change: whoever holds the old one learns that something moved.
        self._tick = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.waits.append(delay)
        self.now += delay

    async def sleep_until(self, when: float | None, wake: asyncio.Event) -> None:
        self.asleep.append(when)
        self._changed()
        try:
            while not wake.is_set() and (when is None or self.now < when):
                ticked = asyncio.ensure_future(self._tick.wait())
                woken = asyncio.ensure_future(wake.wait())
                try:
                    await asyncio.wait({ticked, woken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ticked.cancel()
                    woken.cancel()
        finally:
            self.asleep.remove(when)
            self._changed()

    async def advance(self, seconds: float) -> None:
        """Move time on and let every sleeper look at it."""
        self.now += seconds
        self._changed()
        await asyncio.sleep(0)

    async def idle_until(self, when: float | None, within: float = 10.0) -> None:
        """Wait until some sleeper waits for exactly `when` (None: for no time at all)."""
        async with asyncio.timeout(within):
            while when not in self.asleep:
                await self._tick.wait()

    def _changed(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()


# -- the real CLI and `memgate run` as child processes -------------------------------------------


IMPORT_TIMES = {"PYTHONPROFILEIMPORTTIME": "1"}  # each import on stderr, as `python -X importtime`


def imported(stderr: str) -> set[str]:
    """The modules a process run with IMPORT_TIMES imported."""
    return {
        line.rpartition("|")[2].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:")
    }


async def memgate(
    *args: str, home: Path, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run the real CLI as a child process (the fake LLM keeps serving on this loop meanwhile):
    forked from a warm interpreter (tests/forkserver.py), but a fresh one for a test that reads
    what the command imported (IMPORT_TIMES), or with MEMGATE_TEST_FORK=0."""
    environment = {**os.environ, "MEMGATE_HOME": str(home), **(env or {})}
    fresh = "PYTHONPROFILEIMPORTTIME" in environment
    if not fresh and os.environ.get("MEMGATE_TEST_FORK") != "0":
        return await asyncio.wait_for(run_forked(list(args), environment), 60)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def converse(
    args: list[str], answers: list[tuple[str, str]], env: dict[str, str]
) -> tuple[int, str]:
    """Run memgate on a pseudo-terminal, answering each prompt when it appears."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,  # no controlling terminal: getpass reads the pty on stdin
    )
    os.close(slave)
    output, pending = "", list(answers)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk.decode(errors="replace")
            if pending and pending[0][0] in output.rsplit("\n", 1)[-1]:
                os.write(master, pending.pop(0)[1].encode() + b"\n")
            if process.poll() is not None and not ready:
                break
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return process.wait(), output


def service_config(tmp_path: Path, llm: FakeLLM, telegram: FakeTelegram) -> Path:
    """config.yaml for `memgate run` on tmp_path: the fake LLM, Telegram for user 42."""
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
state_dir: {tmp_path / "state"}
llm:
  base_url: {llm.url}
  api_key: sk-attach-secret-0123456789
  max_retries: 0
  timeout: 20
channels:
  telegram:
    enabled: true
    token: "{TOKEN}"
    allow_from: ["42"]
    base_url: {telegram.url}
    base_file_url: {telegram.file_url}
shutdown_grace: 5
"""
    )
    return path


async def wait_for_socket(socket: Path, process: asyncio.subprocess.Process) -> dict[str, Any]:
    """Until the service answers a status request on its control socket."""
    async with asyncio.timeout(30):
        while True:
            assert process.returncode is None, "memgate run exited early"
            live = await request(socket, {"op": "status"})
            if live is not None and all(live["channels"].values()):
                return live
            await asyncio.sleep(0.1)


@asynccontextmanager
async def memgate_run(
    config: Path, tmp_path: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, Any]]]:
    """`memgate run` on `config` (log in tmp_path/run.log) until the block ends, with its first
    live status; it must then stop cleanly on SIGTERM."""
    with (tmp_path / "run.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gateway", "run", "--config", str(config)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, "MEMGATE_HOME": str(tmp_path / "home")},
        )
    try:
        live = await wait_for_socket(tmp_path / "state" / "control.sock", process)
        yield process, live
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0


# -- turns and what consolidation leaves -----------------------------------------------------------


async def turns(runtime: Runtime, count: int, chat_id: str = "42", **fields: Any) -> None:
    """`count` answered turns in the chat, each "chat <chat_id> turn <index>"."""
    for index in range(count):
        reply = await runtime.agent.handle(
            inbound(f"chat {chat_id} turn {index}", chat_id, **fields)
        )
        assert reply is not None


def corrupt_line(path: Path, number: int) -> None:
    """Overwrite one line in place with as many bytes of garbage (size and end unchanged)."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number] = b"x" * (len(lines[number]) - 1) + b"\n"
    path.write_bytes(b"".join(lines))


TAG = re.compile(r"\n<!-- memgate:[0-9a-f]{16} -->$")


def history_entries(runtime: Runtime) -> list[str]:
    """HISTORY.md's entries without the job tag consolidation adds under each."""
    return [TAG.sub("", e) for e in runtime.memory.read_history().split("\n\n") if e.strip()]


def markers(path: Path) -> list[int]:
    """The last_consolidated of each consolidation marker in a session file, in order."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line["last_consolidated"] for line in lines if line.get("_type") == "consolidated"]
