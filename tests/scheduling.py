"""One gateway process for the scheduler's tests: the real runtime, the real python-telegram-bot
against the fake Bot API (owner: user 42), and a clock the test moves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from channels.telegram.channel import TelegramChannel
from gateway.automation.jobs import Job, new_job
from gateway.service.access import AccessInForce
from gateway.service.app import Runtime, open_runtime
from gateway.service.run import chat_ready, chat_sender
from tests.conftest import ManualClock, build_config, deep_merge
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram_api import TOKEN, FakeTelegram

ZONE = "Europe/Berlin"
TZ = ZoneInfo(ZONE)
# Thursday 26 March 2026, 10:00 in Berlin; summer time starts on Sunday the 29th.
START = datetime(2026, 3, 26, 10, 0, tzinfo=TZ).timestamp()


@dataclass
class Gateway:
    runtime: Runtime
    channel: TelegramChannel
    access: AccessInForce  # who is an owner, as the scheduler asks at each run
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def session_file(self) -> Path:
        return self.runtime.config.workspace / "sessions" / "telegram:42.jsonl"

    def lines(self) -> list[dict[str, Any]]:
        text = self.session_file.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines()[1:]]

    async def connect(self) -> None:
        """Start the channel and wait until it is connected."""
        channel = self.channel
        serving = asyncio.create_task(channel.run())
        self.tasks.append(serving)
        connecting = asyncio.create_task(channel.ready.wait())
        await asyncio.wait([serving, connecting], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        connecting.cancel()
        if serving.done():
            serving.result()  # a failed start, as itself
        assert channel.connected, "the channel did not connect within 10 s"

    def start_scheduler(self) -> None:
        runtime, channels = self.runtime, [self.channel]
        jobs = runtime.scheduler.run(
            runtime.agent, chat_sender(channels), self.access.is_owner, chat_ready(channels)
        )
        self.tasks.append(asyncio.create_task(jobs))


@asynccontextmanager
async def gateway(
    tmp_path: Path,
    fake_llm: FakeLLM,
    telegram: FakeTelegram,
    clock: ManualClock,
    overrides: dict[str, Any] | None = None,
    *,
    connected: bool = True,
) -> AsyncIterator[Gateway]:
    """The channel connected, then the scheduler started (`connected=False`: only the scheduler;
    the test calls `connect()`). Leaving the block kills the process (tasks cancelled, nothing
    written on the way out), as a crash would."""
    base = {"timezone": ZONE, "channels": {"telegram": telegram_settings(telegram, ["42"])}}
    config = build_config(tmp_path / "workspace", fake_llm.url, deep_merge(base, overrides or {}))
    async with open_runtime(config, clock=clock) as runtime:
        channel = TelegramChannel(
            runtime.agent.handle,
            config.channels.telegram,
            workspace=config.workspace,
            state_dir=config.state_dir,
            shutdown_grace=1.0,
        )
        gw = Gateway(runtime, channel, AccessInForce(config))
        try:
            if connected:
                await gw.connect()
            gw.start_scheduler()
            yield gw
        finally:
            for task in reversed(gw.tasks):  # the scheduler, then the channel
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


def telegram_settings(telegram: FakeTelegram, allow_from: list[str]) -> dict[str, Any]:
    """channels.telegram on the fake Bot API, for the owners in `allow_from`."""
    return {
        "token": TOKEN,
        "allow_from": allow_from,
        "dm_policy": "allowlist",
        "base_url": telegram.url,
        "base_file_url": telegram.file_url,
    }


def job(runtime: Runtime, **fields: Any) -> Job:
    """A job in telegram:42 made as the schedule tool makes it, added through the scheduler."""
    made = new_job(
        session="telegram:42", channel="telegram", chat_id="42", now=runtime.scheduler.clock(),
        tz=TZ, **fields,
    )  # fmt: skip
    return runtime.scheduler.add(made)


async def settled(runtime: Runtime, clock: ManualClock, until: float | None = None) -> None:
    """Wait until no job is running or being delivered and the scheduler sleeps until `until`."""
    async with asyncio.timeout(10):
        await runtime.scheduler.wait_for(lambda: runtime.scheduler.idle)
    await clock.idle_until(until)


def echoed(telegram: FakeTelegram, word: str) -> bool:
    return f"echo: {word}" in texts(telegram)


def texts(telegram: FakeTelegram) -> list[str]:
    return [str(sent["text"]) for sent in telegram.sent(42)]
