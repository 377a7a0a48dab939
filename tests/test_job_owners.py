"""A job runs with the rights its maker has when it runs: made by an owner who is no longer one,
it is paused, with nothing asked of the model and nothing sent."""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gateway.automation.jobs import JobStore, new_job
from gateway.service.access import AccessInForce
from tests.conftest import ManualClock, memgate, memgate_run, service_config, wait_for_log
from tests.fakes.llm import FakeLLM, is_background, text, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduling import START, TZ, gateway, settled, texts

pytestmark = [
    # PTB 22 warns that RetryAfter.retry_after will become a timedelta (see tests/test_telegram.py).
    pytest.mark.filterwarnings(
        "ignore:Deprecated since version .*attribute `retry_after`"
        ":telegram.warnings.PTBDeprecationWarning"
    ),
]

UTC = ZoneInfo("UTC")
ENV = {"OPENAI_API_KEY": "sk-cli-test-key-123456"}


def not_background(body: dict[str, Any]) -> bool:
    return not is_background(body)


def set_owners(access: AccessInForce, allow_from: list[str]) -> None:
    """What a reload does to the settings in force: channels.telegram.allow_from replaced."""
    channels = access.config.channels
    telegram = channels.telegram.model_copy(update={"allow_from": allow_from})
    update = {"channels": channels.model_copy(update={"telegram": telegram})}
    access.config = access.config.model_copy(update=update)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("removed_by", ["reload", "restart"])
async def test_a_job_whose_maker_left_allow_from_is_paused_and_asks_and_sends_nothing(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, removed_by: str
) -> None:
    """Owner 42 made a prompt job, then was removed from allow_from (SIGHUP or a restart): when
    it comes due it is paused with that reason in `memgate jobs`; no model call, nothing sent."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    owner_only, removed = 'allow_from: ["42"]', 'allow_from: ["43"]'
    log = tmp_path / "run.log"
    made = new_job(
        session="telegram:42", channel="telegram", chat_id="42", now=time.time() - 120, tz=UTC,
        every="1m", prompt="summarise MEMORY.md for me", creator="42",
    )  # fmt: skip  # due a minute ago, well within automation.grace
    if removed_by == "reload":
        # Held until 42 is removed; resuming it then makes it due at once.
        made = replace(made, paused="paused by the owner")
    else:
        config.write_text(config.read_text().replace(owner_only, removed))
    JobStore(tmp_path / "state").put(made)
    async with memgate_run(config, tmp_path) as (process, _):
        if removed_by == "reload":
            config.write_text(config.read_text().replace(owner_only, removed))
            process.send_signal(signal.SIGHUP)
            await wait_for_log(log, "config reloaded")
            cli = ("jobs", "resume", made.id, "--config", str(config))
            assert (await memgate(*cli, home=tmp_path, env=ENV))[0] == 0
        await wait_for_log(log, f"id={made.id}")  # its first line: paused (or run)
        code, out, err = await memgate("jobs", "--config", str(config), home=tmp_path, env=ENV)
    assert code == 0, err
    assert f"{made.id}  every 1m" in out
    assert "PAUSED (made by telegram user 42, no longer an owner)" in out
    assert fake_llm.requests == []
    assert fake_telegram.sent(42) == []


@pytest.mark.timeout(120)
async def test_a_background_task_of_someone_taken_out_by_a_reload_stops(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Owner 42 starts a background task under memgate run, then is removed from allow_from by a
    SIGHUP while it works: the task stops at the reload and nothing of it reaches the chat."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    log = tmp_path / "run.log"
    release = asyncio.Event()
    fake_llm.push(
        tool_call("spawn", {"task": "read my notes and sum them up"}), match=not_background
    )
    fake_llm.push(text("Started it."), match=not_background)
    fake_llm.push(text("Your notes say: buy milk."), hold=release, match=is_background)
    async with memgate_run(config, tmp_path) as (process, _):
        fake_telegram.message("please go through my notes in the background")
        await fake_telegram.wait_for(lambda: "Started it." in texts(fake_telegram))
        await fake_llm.wait_for(lambda: any(is_background(r) for r in fake_llm.requests))
        config.write_text(config.read_text().replace('allow_from: ["42"]', 'allow_from: ["43"]'))
        process.send_signal(signal.SIGHUP)
        await wait_for_log(log, "background task stopped id=")
        release.set()
    assert not any("buy milk" in t for t in texts(fake_telegram))


async def test_a_reminder_of_an_owner_by_name_pauses_when_removed_and_runs_when_back(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """An owner listed as @alice makes a reminder (the job records id and @name); with @alice
    removed it is paused when due and sends nothing; listed again and resumed, it is sent."""
    clock = ManualClock(START)
    fake_llm.push(tool_call("schedule", {"at": "2026-03-26T10:05", "message": "Water the plants"}))
    fake_llm.push(text("Will do."))
    owners = {"channels": {"telegram": {"allow_from": ["@alice"]}}}
    async with gateway(tmp_path, fake_llm, fake_telegram, clock, owners) as gw:
        scheduler = gw.runtime.scheduler
        fake_telegram.message("remind me at 10:05 to water the plants", username="alice")
        await fake_telegram.wait_sent(1)
        [made] = scheduler.jobs()
        assert (made.creator, made.creator_username) == ("42", "alice")
        set_owners(gw.access, ["@bob"])
        assert made.next_run is not None
        await clock.idle_until(made.next_run)
        await clock.advance(made.next_run - clock.now)
        await settled(gw.runtime, clock, None)
        [kept] = scheduler.jobs()
        assert kept.paused == "made by telegram user 42, no longer an owner"
        assert texts(fake_telegram) == ["Will do."]
        set_owners(gw.access, ["@alice"])
        scheduler.resume(made.id)
        await fake_telegram.wait_sent(2)
        await settled(gw.runtime, clock)
        assert texts(fake_telegram) == ["Will do.", "Water the plants"]
        assert scheduler.jobs() == []
    assert len(fake_llm.chat_requests()) == 2  # the one turn that made the job


async def test_a_job_made_by_a_jobs_turn_has_that_jobs_maker(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A scheduled prompt's turn that schedules a reminder makes it with the prompt job's maker
    (not the scheduler), so it runs while that person is an owner."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        scheduler = gw.runtime.scheduler
        planner = new_job(
            session="telegram:42", channel="telegram", chat_id="42", now=START, tz=TZ,
            every="1h", prompt="plan the next hour", creator="42", creator_username="alice",
        )  # fmt: skip
        hourly = scheduler.add(planner)
        at = datetime.fromtimestamp(START + 3900, TZ).strftime("%Y-%m-%dT%H:%M")
        fake_llm.push(tool_call("schedule", {"at": at, "message": "Stretch"}))
        fake_llm.push(text("Planned."))
        assert hourly.next_run is not None
        await clock.idle_until(hourly.next_run)
        await clock.advance(hourly.next_run - clock.now)
        await fake_telegram.wait_sent(1)
        [made] = [j for j in scheduler.jobs() if j.id != hourly.id]
        assert (made.creator, made.creator_username) == ("42", "alice")
        assert made.next_run is not None
        await settled(gw.runtime, clock, made.next_run)
        await clock.advance(made.next_run - clock.now)
        await fake_telegram.wait_sent(2)
    assert texts(fake_telegram) == ["Planned.", "Stretch"]
