"""Scheduled jobs end to end: the real runtime and the real python-telegram-bot against the fakes,
with a clock the test moves, so a job due in two minutes needs no two minutes."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from functools import partial
from pathlib import Path

import pytest

from gateway.automation.heartbeat import Heartbeat
from gateway.automation.scheduler import CHANNEL_WAIT, RETRY_DELAYS
from gateway.bus import OutboundMessage
from gateway.service.run import chat_sender
from tests.conftest import ManualClock
from tests.fakes.llm import FakeLLM, last_user_text, text, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.scheduling import START, TZ, echoed, gateway, job, settled, texts

pytestmark = [
    # PTB 22 warns that RetryAfter.retry_after will become a timedelta (see tests/test_telegram.py).
    pytest.mark.filterwarnings(
        "ignore:Deprecated since version .*attribute `retry_after`"
        ":telegram.warnings.PTBDeprecationWarning"
    ),
]


async def test_reminder_two_minutes_ahead_arrives_once_at_its_time(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """The model schedules a message two minutes ahead: nothing before, then once, in the chat
    and in its session."""
    clock = ManualClock(START)
    due = START + 120
    at = datetime.fromtimestamp(due, TZ).strftime("%Y-%m-%dT%H:%M:%S")  # local, no offset
    fake_llm.push(tool_call("schedule", {"at": at, "message": "Call the bank"}))
    fake_llm.push(text("I will remind you at 10:02."))
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        fake_telegram.message("remind me in two minutes to call the bank")
        await fake_telegram.wait_sent(1)
        await clock.idle_until(due)
        await clock.advance(119)
        await clock.idle_until(due)
        assert texts(fake_telegram) == ["I will remind you at 10:02."]
        await clock.advance(1)
        await fake_telegram.wait_sent(2)
        await settled(gw.runtime, clock)  # no job left to wait for
        assert texts(fake_telegram) == ["I will remind you at 10:02.", "Call the bank"]
        *_, reminder, mark = gw.lines()
        assert reminder["role"] == "assistant" and reminder["content"] == "Call the bank"
        assert reminder["job"] and reminder["run"].startswith(f"job-{reminder['job']}-")
        assert mark == {**mark, "_type": "delivered", "reply_id": reminder["reply_id"]}
        assert gw.runtime.scheduler.jobs() == []


async def test_weekday_cron_fires_at_eight_local_across_the_dst_change(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """'0 8 * * 1-5' in Berlin is delivered at 08:00 local on weekdays only, before and after
    summer time starts, and never at any other time."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        made = job(gw.runtime, cron="0 8 * * 1-5", message="Good morning")
        due = made.next_run
        delivered: list[str] = []
        for count in range(1, 5):
            assert due is not None
            await clock.idle_until(due)
            await clock.advance(due - clock.now)
            await fake_telegram.wait_sent(count)
            delivered.append(datetime.fromtimestamp(clock.now, TZ).strftime("%a %d %H:%M %Z"))
            following = gw.runtime.scheduler.store.get(made.id)
            assert following is not None
            due = following.next_run
        assert delivered == [
            "Fri 27 08:00 CET",
            "Mon 30 08:00 CEST",
            "Tue 31 08:00 CEST",
            "Wed 01 08:00 CEST",
        ]
        assert texts(fake_telegram) == ["Good morning"] * 4


async def test_a_job_due_while_down_runs_once_at_start_within_grace(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Stopped before a job was due and started 30 minutes after: it runs once, and a further
    restart does not run it again."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        due = job(gw.runtime, at="2026-03-26T10:10", message="Stand up").next_run
        await clock.idle_until(due)
    await clock.advance(40 * 60)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        await fake_telegram.wait_sent(1)
        await settled(gw.runtime, clock)
        assert gw.runtime.scheduler.jobs() == []
    async with gateway(tmp_path, fake_llm, fake_telegram, clock):
        await clock.idle_until(None)
    assert texts(fake_telegram) == ["Stand up"]


async def test_a_reminder_due_before_a_restart_waits_for_the_channel_then_goes_at_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A reminder due 2 s before a restart waits for Telegram to connect and is sent as soon as
    it has: no failed attempt recorded, no retry delay waited out."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        made = job(gw.runtime, at="2026-03-26T10:05", message="Water the plants")
        assert made.next_run is not None
        await clock.idle_until(made.next_run)
    await clock.advance(made.next_run + 2 - clock.now)
    restarted = clock.now
    async with gateway(tmp_path, fake_llm, fake_telegram, clock, connected=False) as gw:
        await clock.idle_until(restarted + CHANNEL_WAIT)  # the due reminder waits, bounded
        [waiting] = gw.runtime.scheduler.jobs()
        assert (waiting.failures, waiting.pending, texts(fake_telegram)) == (0, None, [])
        await gw.connect()
        await fake_telegram.wait_sent(1)
        await settled(gw.runtime, clock)
        assert gw.runtime.scheduler.jobs() == []  # delivered: the one-off job is gone
        assert clock.now == restarted  # sent without any time passing, so with no retry
    assert texts(fake_telegram) == ["Water the plants"]


async def test_a_channel_still_down_after_the_wait_falls_back_to_the_retries(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """If the channel does not connect within the bounded wait, the reminder is tried, fails
    and is retried after the first delay, as any undeliverable text."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock, connected=False) as gw:
        scheduler = gw.runtime.scheduler
        made = job(gw.runtime, at="2026-03-26T10:05", message="Water the plants")
        assert made.next_run is not None
        await clock.idle_until(made.next_run)
        await clock.advance(made.next_run - clock.now)
        await clock.idle_until(clock.now + CHANNEL_WAIT)
        await clock.advance(CHANNEL_WAIT)
        retry_at = clock.now + RETRY_DELAYS[0]
        await settled(gw.runtime, clock, retry_at)
        [failed] = scheduler.jobs()
        assert failed.failures == 1 and failed.pending == "Water the plants"
        await gw.connect()
        await clock.advance(RETRY_DELAYS[0])
        await fake_telegram.wait_sent(1)
        await settled(gw.runtime, clock)
        assert scheduler.jobs() == []
    assert texts(fake_telegram) == ["Water the plants"]


async def test_a_job_missed_beyond_grace_is_skipped_with_a_log_line(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    """Started two hours after a job was due (grace one hour): nothing is sent, a log line says
    so, and a recurring job gets its next run instead."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        once = job(gw.runtime, at="2026-03-26T10:10", message="Too late")
        daily = job(gw.runtime, cron="15 10 * * *", message="Daily")
        await clock.idle_until(once.next_run)
    await clock.advance(2 * 3600 + 10 * 60)
    caplog.set_level(logging.WARNING, logger="gateway.automation.scheduler")
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        tomorrow = datetime(2026, 3, 27, 10, 15, tzinfo=TZ).timestamp()
        await clock.idle_until(tomorrow)
        assert [j.id for j in gw.runtime.scheduler.jobs()] == [daily.id]
    assert texts(fake_telegram) == []
    skipped = [r.getMessage() for r in caplog.records if "job skipped" in r.getMessage()]
    assert len(skipped) == 2 and f"id={once.id}" in skipped[0] + skipped[1]


async def test_a_cron_job_late_within_grace_runs_once_and_next_after_now(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A five-minute cron job started twelve minutes late (within grace) runs once; its next run
    is the first after now, not one of the times it missed since its old due time."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        made = job(gw.runtime, cron="*/5 * * * *", message="Tick")  # due 10:05
        await clock.idle_until(made.next_run)
    await clock.advance(17 * 60)  # started at 10:17
    following = datetime(2026, 3, 26, 10, 20, tzinfo=TZ).timestamp()
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        await fake_telegram.wait_sent(1)
        await settled(gw.runtime, clock, following)
        [kept] = gw.runtime.scheduler.jobs()
        assert (kept.last_due, kept.next_run) == (made.next_run, following)
    assert texts(fake_telegram) == ["Tick"]


async def test_a_kill_during_a_run_finishes_that_run_at_start_and_never_runs_it_twice(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A job's run is recorded before its turn: killed while the turn is under way and started
    again, the same run is finished (its turn answered and delivered once, as any interrupted
    message), and the job does not run a second time for that due time."""
    clock = ManualClock(START)
    held = asyncio.Event()
    fake_llm.push(text("lost with the process"), hold=held)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        hourly = job(gw.runtime, every="1h", prompt="check the oven")
        assert hourly.next_run is not None
        await clock.idle_until(hourly.next_run)
        await clock.advance(hourly.next_run - clock.now)
        await fake_llm.wait_for_requests(1, "chat")
    # Killed mid-turn; the next process starts a second later, well within the grace.
    held.set()
    fake_llm.push(text("the oven is off"))
    await clock.advance(1)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        await fake_telegram.wait_sent(1)
        await settled(gw.runtime, clock, hourly.next_run + 3600)
        assert len(fake_llm.chat_requests()) == 2  # the lost answer, then the finished run
        [kept] = gw.runtime.scheduler.jobs()
        assert kept.run is None and kept.next_run == hourly.next_run + 3600
        asked = [m for m in gw.lines() if m.get("role") == "user"]
        assert [m["content"] for m in asked] == ["check the oven"]  # stored once
    assert texts(fake_telegram) == ["the oven is off"]


async def test_a_kill_between_storing_and_sending_a_reminder_sends_it_once_at_start(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A reminder stored in the session but not yet taken by Telegram when the process dies is
    sent after the restart, once, stored once, and marked delivered; the one-off job is gone."""
    clock = ManualClock(START)
    with fake_telegram.sends_unanswered() as arrived:
        async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
            made = job(gw.runtime, at="2026-03-26T10:05", message="Water the plants")
            assert made.next_run is not None
            await clock.idle_until(made.next_run)
            await clock.advance(made.next_run - clock.now)
            await asyncio.wait_for(arrived.wait(), 10)
            owed = [m for m in gw.lines() if m.get("content") == "Water the plants"]
            assert len(owed) == 1 and owed[0]["reply_id"]
    await clock.advance(1)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        await fake_telegram.wait_sent(1)
        await settled(gw.runtime, clock)
        assert gw.runtime.scheduler.jobs() == []
        lines = gw.lines()
        stored = [m for m in lines if m.get("content") == "Water the plants"]
        assert len(stored) == 1
        delivered = [m for m in lines if m.get("_type") == "delivered"]
        assert [m["reply_id"] for m in delivered] == [stored[0]["reply_id"]]
    assert texts(fake_telegram) == ["Water the plants"]
    assert fake_llm.chat_requests() == []


async def test_a_scheduled_turn_and_a_message_never_interleave(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A job's prompt that comes due while the person's turn runs waits for it; both land in
    order in the session, the job's marked as scheduled, and consolidation still runs."""
    clock = ManualClock(START)
    held = asyncio.Event()
    fake_llm.push(text("answer to you"), hold=held, match=lambda b: "hello" in last_user_text(b))
    async with gateway(tmp_path, fake_llm, fake_telegram, clock, {"memory": {"window": 4}}) as gw:
        summary = job(gw.runtime, every="1h", prompt="summarise my notes")
        assert summary.next_run is not None
        for word in ("one", "two"):  # earlier conversation, for consolidation to take
            fake_telegram.message(word)
            await fake_telegram.wait_for(partial(echoed, fake_telegram, word))
        fake_telegram.message("hello")
        await fake_llm.wait_for_requests(3, "chat")
        await clock.advance(summary.next_run - clock.now)
        async with asyncio.timeout(10):  # the job's turn has started (and waits)
            await gw.runtime.scheduler.wait_for(lambda: gw.runtime.scheduler.runs >= 1)
        assert len(fake_llm.chat_requests()) == 3  # nothing asked for the job meanwhile
        held.set()
        await fake_telegram.wait_for(lambda: len(texts(fake_telegram)) == 4)
        await fake_llm.wait_for_requests(1, "consolidation")
        messages = [m for m in gw.lines() if "role" in m]  # markers left out
        lines = [(m["role"], str(m.get("content"))[:40]) for m in messages]
        hello = lines.index(("user", "hello"))
        assert lines[hello + 1] == ("assistant", "answer to you")
        scheduled = messages[hello + 2]
        assert scheduled["role"] == "user" and scheduled["content"] == "summarise my notes"
        assert scheduled["sender"] == "scheduler" and scheduled["message_id"].startswith("job-")
        assert lines[hello + 3][0] == "assistant"


async def test_undeliverable_text_is_retried_then_the_job_is_paused_with_the_reason(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A bot blocked by the user: the reminder is tried again a few times, then the job is paused
    and the listing says why; resumed, the kept text is delivered once."""
    clock = ManualClock(START)
    for _ in range(4):
        fake_telegram.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        scheduler = gw.runtime.scheduler
        made = job(gw.runtime, at="2026-03-26T10:05", message="Water the plants")
        assert made.next_run is not None
        await clock.idle_until(made.next_run)
        await clock.advance(made.next_run - clock.now)

        def failed(times: int) -> bool:
            kept = scheduler.store.get(made.id)
            return kept is not None and kept.failures == times and scheduler.idle

        for attempt in range(1, 4):
            async with asyncio.timeout(10):
                await scheduler.wait_for(partial(failed, attempt))
            kept = scheduler.store.get(made.id)
            assert kept is not None and kept.retry_at is not None and not kept.paused
            await clock.idle_until(kept.retry_at)
            await clock.advance(kept.retry_at - clock.now)
        async with asyncio.timeout(10):
            await scheduler.wait_for(lambda: failed(4))
        assert texts(fake_telegram) == []
        listing = scheduler.jobs()[0].describe(TZ)
        assert "PAUSED (delivery failed 4 times" in listing
        scheduler.resume(made.id)
        await fake_telegram.wait_sent(1)
        await settled(gw.runtime, clock)
        assert texts(fake_telegram) == ["Water the plants"]
        assert scheduler.jobs() == []


async def test_heartbeat_with_an_empty_checklist_asks_nothing_and_a_full_one_may_speak(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """HEARTBEAT.md with only a heading: no model call at all. With a task: one turn per beat,
    silent when the model says HEARTBEAT_OK, sent to the home chat when it has something."""
    clock = ManualClock(START)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        workspace = gw.runtime.config.workspace
        (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n\n")
        beat = Heartbeat(workspace, "telegram:42", 1800, clock)
        deliver = chat_sender([gw.channel])
        beating = asyncio.create_task(beat.run(gw.runtime.agent, deliver))
        try:
            for n in range(1, 3):
                await clock.idle_until(START + 1800 * n)
                await clock.advance(1800)
            await clock.idle_until(START + 1800 * 3)
            assert fake_llm.requests == [] and beat.beats == 0
            (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n- tell me if it is Friday\n")
            fake_llm.push(text("HEARTBEAT_OK"))
            fake_llm.push(text("It is Friday tomorrow."))
            for n in range(3, 5):
                await clock.advance(1800)
                await clock.idle_until(START + 1800 * (n + 1))
            await fake_telegram.wait_sent(1)
            assert len(fake_llm.chat_requests()) == 2
            assert "tell me if it is Friday" in last_user_text(fake_llm.chat_requests()[0])
            assert texts(fake_telegram) == ["It is Friday tomorrow."]
            assert (workspace / "sessions" / "heartbeat.jsonl").exists()  # its own session
            assert not gw.session_file.exists()  # the home chat's conversation is untouched
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)


async def test_heartbeat_message_its_chat_never_got_is_sent_once_after_a_restart(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A heartbeat answer that could not be delivered stays owed in the heartbeat's session; the
    next process sends it to the home chat before asking anything new, once. A silent answer
    (HEARTBEAT_OK) is owed to nobody."""
    clock = ManualClock(START)

    async def not_connected(message: OutboundMessage) -> str | None:
        return "telegram is not connected"  # what chat_sender says of a channel still starting

    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        workspace = gw.runtime.config.workspace
        (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n- water the plants at ten\n")
        fake_llm.push(text("Time to water the plants."))
        await Heartbeat(workspace, "telegram:42", 1800, clock).beat(gw.runtime.agent, not_connected)
        session = await gw.runtime.agent.sessions.get("heartbeat")
        assert [m["content"] for m in session.owed()] == ["Time to water the plants."]
    assert texts(fake_telegram) == []

    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        beat = Heartbeat(gw.runtime.config.workspace, "telegram:42", 1800, clock)
        deliver = chat_sender([gw.channel])
        fake_llm.push(text("HEARTBEAT_OK"))
        await beat.send_owed(gw.runtime.agent, deliver)
        await beat.beat(gw.runtime.agent, deliver)  # silent: nothing sent, nothing owed
        session = await gw.runtime.agent.sessions.get("heartbeat")
        assert session.owed() == []
        await beat.send_owed(gw.runtime.agent, deliver)  # nothing left to send again
        await fake_telegram.wait_sent(1)
        assert len(fake_llm.chat_requests()) == 2
    assert texts(fake_telegram) == ["Time to water the plants."]


async def test_heartbeat_message_owed_at_start_waits_for_the_channel_to_connect(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A heartbeat message kept from before a restart is sent as soon as the home chat's channel
    connects, not half an hour later at the next wake."""
    clock = ManualClock(START)

    async def not_connected(message: OutboundMessage) -> str | None:
        return "telegram is not connected"

    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        workspace = gw.runtime.config.workspace
        (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n- water the plants at ten\n")
        fake_llm.push(text("Time to water the plants."))
        await Heartbeat(workspace, "telegram:42", 1800, clock).beat(gw.runtime.agent, not_connected)
    async with gateway(tmp_path, fake_llm, fake_telegram, clock, connected=False) as gw:
        beat = Heartbeat(gw.runtime.config.workspace, "telegram:42", 1800, clock)
        deliver = chat_sender([gw.channel])
        beating = asyncio.create_task(beat.run(gw.runtime.agent, deliver, gw.channel.ready))
        try:
            await clock.idle_until(START + CHANNEL_WAIT)  # waiting on the channel, bounded
            await gw.connect()
            await fake_telegram.wait_sent(1)
            assert clock.now == START  # no time passed: sent on connecting, not at a wake
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
    assert texts(fake_telegram) == ["Time to water the plants."]


async def test_heartbeat_is_silent_only_when_the_answer_is_heartbeat_ok(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """HEARTBEAT_OK alone (trimmed, even in backticks or bold) sends nothing; an answer that only
    mentions it is a message for the owner and is sent."""
    clock = ManualClock(START)
    mention = "The backup failed. Once fixed I will answer HEARTBEAT_OK again."
    async with gateway(tmp_path, fake_llm, fake_telegram, clock) as gw:
        workspace = gw.runtime.config.workspace
        (workspace / "HEARTBEAT.md").write_text("# Heartbeat\n- check the backup\n")
        beat = Heartbeat(workspace, "telegram:42", 1800, clock)
        deliver = chat_sender([gw.channel])
        for answer in ("  HEARTBEAT_OK\n", "`HEARTBEAT_OK`", "**HEARTBEAT_OK**.", mention):
            fake_llm.push(text(answer))
            await beat.beat(gw.runtime.agent, deliver)
        await fake_telegram.wait_sent(1)
        assert (await gw.runtime.agent.sessions.get("heartbeat")).owed() == []
    assert texts(fake_telegram) == [mention]
