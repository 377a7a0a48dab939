"""Crashes: `memgate run` SIGKILLed at random moments (3 times; MEMGATE_CRASH_KILLS to change,
`make soak` runs 20) while 20 chats keep writing.

Set MEMGATE_CRASH_SEED to replay a run's random choices (the seed is printed and named in every
failure). Two deterministic tests place a kill where a message was once lost: after Telegram
heard the offset and memgate recorded the update, but before the message was stored.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.fakes.llm import FakeLLM, start_fake_llm, text
from tests.fakes.telegram_api import BOT, FakeTelegram, start_fake_telegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.crash import CrashReport, crash_run
from tests.resilience.harness import read_sessions, until

# Each kill costs a start (about 3 s); `make test` keeps to a few, `make soak` runs 20.
KILLS = int(os.environ.get("MEMGATE_CRASH_KILLS") or 3)
CHATS = 20


@pytest.fixture
def crash_report(tmp_path_factory: pytest.TempPathFactory) -> CrashReport:
    """One crash run."""
    seed = int(os.environ.get("MEMGATE_CRASH_SEED") or random.randrange(2**32))
    root = tmp_path_factory.mktemp("crash")

    env = {"TIKTOKEN_CACHE_DIR": str(tmp_path_factory.mktemp("tiktoken"))}

    async def run() -> CrashReport:
        llm, llm_runner = await start_fake_llm()
        telegram, telegram_runner = await start_fake_telegram()
        try:
            return await crash_run(
                root,
                llm,
                telegram,
                kills=KILLS,
                chats=CHATS,
                seed=seed,
                env=env,
                # At least once: a repeat needs a kill between Telegram's acceptance and the
                # inbox done line, which under this load is tens of milliseconds (6 to 16 seen).
                max_repeats=2 * KILLS,
            )
        finally:
            await telegram_runner.cleanup()
            await llm_runner.cleanup()

    return asyncio.run(run())


@pytest.mark.timeout(600)
def test_kills_lose_no_message_and_break_no_promise(crash_report: CrashReport) -> None:
    """After the kills: no message lost, every one answered, at most two repeats per kill, JSONL
    valid, MEMORY.md whole, nothing stored twice."""
    report = crash_report
    assert report.lost == [], f"seed {report.seed}: {report.summary()}"
    assert report.kills == KILLS and report.starts == KILLS + 1, report.summary()
    assert report.problems == [], f"seed {report.seed}: {report.summary()}"
    assert report.replies > 0 and report.consolidations > 0 and report.memory_versions > 1
    assert report.torn_tails == 0, f"seed {report.seed}: a session ends in a torn line"


def handled_id(state_dir: Path) -> int:
    path = state_dir / f"telegram-{BOT['id']}.json"
    return int(json.loads(path.read_text())["last_update_id"]) if path.exists() else 0


@pytest.mark.timeout(90)
async def test_a_message_queued_behind_a_running_turn_survives_a_kill(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A second message that waits for its chat's running turn is still there after SIGKILL."""
    gateway = make_gateway()
    await gateway.start()
    release = asyncio.Event()
    fake_llm.push(text("first answer"), hold=release)
    fake_telegram.message("first question")
    await fake_llm.wait_for_requests(1, kind="chat", within=20)
    second = fake_telegram.message("second question, waiting its turn")
    await until(lambda: fake_telegram.confirmed > second, 20, "Telegram hearing the offset")
    # memgate has marked it handled, so it will not take it again if Telegram redelivers it.
    await until(lambda: handled_id(gateway.state_dir) == second, 20, "memgate recording the update")
    await gateway.kill()
    release.set()
    await gateway.start()
    fake_telegram.message("third question")
    await until(
        lambda: any(p.get("plain") == "echo: third question" for p in fake_telegram.sent()),
        30,
        "the answer to the third question",
    )
    await gateway.stop()
    users = [t for s in read_sessions(gateway.workspace) for t in s.texts("user")]
    assert "second question, waiting its turn" in users


@pytest.mark.timeout(90)
async def test_a_message_whose_photo_is_downloading_survives_a_kill(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram
) -> None:
    """A photo's caption is not lost when the process dies while the photo downloads."""
    gateway = make_gateway()
    await gateway.start()
    release = asyncio.Event()
    serve_file = fake_telegram._api_getFile

    async def slow_get_file(params: dict[str, Any]) -> dict[str, Any] | web.Response:
        await release.wait()
        return await serve_file(params)

    fake_telegram._api_getFile = slow_get_file  # type: ignore[method-assign]
    photo = fake_telegram.add_file(b"\xff\xd8jpeg", file_id="p1", unique_id="u1", path="p/1.jpg")
    update = fake_telegram.message(
        None, photo=[{**photo, "width": 9, "height": 9}], caption="remember my cat"
    )
    await until(
        lambda: bool(fake_telegram.calls_to("getFile")) and fake_telegram.confirmed > update,
        20,
        "the download to start and Telegram to hear the offset",
    )
    await gateway.kill()
    release.set()
    fake_telegram._api_getFile = serve_file  # type: ignore[method-assign]
    await gateway.start()
    fake_telegram.message("are you there?")
    await until(
        lambda: any(p.get("plain") == "echo: are you there?" for p in fake_telegram.sent()),
        30,
        "the next answer",
    )
    await gateway.stop()
    users = [t for s in read_sessions(gateway.workspace) for t in s.texts("user")]
    assert any("remember my cat" in u for u in users)
