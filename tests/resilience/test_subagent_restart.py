"""A background agent cut by a SIGKILL: after the restart its chat is told it was interrupted,
once, and its result (which the kill lost) never comes; further restarts tell nothing more."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.conftest import memgate
from tests.fakes.llm import FakeLLM, is_background, is_consolidation, text, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import SECRETS, read_sessions, until

RESULT = "Summary of the ten pages: all about tomatoes."
STARTED = "Started; I will tell you when it is done."


def _chat(body: dict[str, Any]) -> bool:
    return not is_background(body) and not is_consolidation(body)


def _count(fake_telegram: FakeTelegram, needle: str) -> int:
    return sum(needle in str(p.get("plain", p.get("text"))) for p in fake_telegram.sent())


@pytest.mark.timeout(120)
async def test_a_kill_during_a_background_agent_is_reported_once_after_the_restart(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed while its background agent's model call is held (`memgate status` lists it), the
    chat hears once after the restart that the task was interrupted, stored and marked delivered
    in its session; the result is never sent, and a second restart sends nothing more."""
    gateway = make_gateway()
    await gateway.start()
    held = asyncio.Event()
    fake_llm.push(tool_call("spawn", {"task": "read ten pages", "label": "ten pages"}), match=_chat)
    fake_llm.push(text(STARTED), match=_chat)
    fake_llm.push(text(RESULT), hold=held, match=is_background)
    fake_telegram.message("summarise the ten pages for me")
    await until(lambda: _count(fake_telegram, STARTED) == 1, 30, "the parent's answer")
    await fake_llm.wait_for(lambda: any(is_background(r) for r in fake_llm.requests), within=30)
    listed = json.loads((gateway.state_dir / "subagents.json").read_text())["running"]
    assert [entry["label"] for entry in listed] == ["ten pages"]
    await gateway.kill()
    held.set()  # the killed process's call gets its answer now, and nobody reads it
    status = ("status", "--config", str(gateway.config_path))
    code, out, err = await memgate(*status, home=gateway.home, env=SECRETS)
    assert code == 0, err
    assert "subagents:  1 running or not yet reported" in out and "(ten pages)" in out

    await gateway.start()
    await until(lambda: _count(fake_telegram, "was interrupted by a restart") == 1, 30, "the note")
    await until(
        lambda: json.loads((gateway.state_dir / "subagents.json").read_text())["running"] == [],
        30,
        "the task forgotten once its note was delivered",
    )
    assert await gateway.stop() == 0
    code, out, err = await memgate(*status, home=gateway.home, env=SECRETS)
    assert code == 0 and "subagents:  none running" in out, err
    await gateway.start()
    fake_telegram.message("anything new?")
    await until(lambda: _count(fake_telegram, "echo: anything new?") == 1, 30, "the echo")
    assert await gateway.stop() == 0

    assert _count(fake_telegram, "was interrupted by a restart") == 1
    assert _count(fake_telegram, RESULT) == 0
    assert _count(fake_telegram, STARTED) == 1
    parent = next(f for f in read_sessions(gateway.workspace) if f.path.name == "telegram:42.jsonl")
    notes = [m for m in parent.messages if "was interrupted by a restart" in str(m.get("content"))]
    assert len(notes) == 1
    delivered = {r.get("reply_id") for r in parent.records if r.get("_type") == "delivered"}
    assert notes[0]["reply_id"] in delivered


@pytest.mark.timeout(120)
async def test_a_kill_while_a_result_is_being_sent_sends_that_result_once_after_the_restart(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed after the background agent's result was stored and while Telegram had not yet
    taken it, the restart sends the stored result once (no model call for it, no note of an
    interruption), and it is marked delivered."""
    gateway = make_gateway()
    await gateway.start()
    fake_llm.push(tool_call("spawn", {"task": "read ten pages", "label": "ten pages"}), match=_chat)
    fake_llm.push(text(STARTED), match=_chat)
    fake_llm.push(text(RESULT), match=is_background)
    with fake_telegram.calls_unanswered("sendMessage", lambda p: RESULT in p["text"]) as arrived:
        fake_telegram.message("summarise the ten pages for me")
        async with asyncio.timeout(30):
            await arrived.wait()
        await gateway.kill()
    await gateway.start()
    await until(lambda: _count(fake_telegram, RESULT) == 1, 30, "the stored result")
    await until(
        lambda: json.loads((gateway.state_dir / "subagents.json").read_text())["running"] == [],
        30,
        "the task forgotten once its result was delivered",
    )
    assert await gateway.stop() == 0

    assert _count(fake_telegram, RESULT) == 1
    assert _count(fake_telegram, "was interrupted by a restart") == 0
    assert sum(1 for r in fake_llm.requests if is_background(r)) == 1
    parent = next(f for f in read_sessions(gateway.workspace) if f.path.name == "telegram:42.jsonl")
    stored = [m for m in parent.messages if RESULT in str(m.get("content"))]
    assert len(stored) == 1
    delivered = {r.get("reply_id") for r in parent.records if r.get("_type") == "delivered"}
    assert stored[0]["reply_id"] in delivered
