"""The Discord channel in front of the real agent: fake Discord and fake LLM, both on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.service.app import Runtime
from tests.fakes.discord_api import ALICE, DM, MALLORY, STRANGER_DM, FakeDiscord, barrier, serving
from tests.fakes.llm import FakeLLM, text


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    """The shared fake Discord (tests/conftest.py) under this module's short name."""
    return fake_discord


def workspace(runtime: Runtime) -> Path:
    return runtime.config.workspace


async def test_dm_is_answered_by_the_agent_through_the_llm(
    fake: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A DM goes through the agent to the LLM; its answer comes back in the DM, session on disk."""
    fake_llm.push(text("Hello Alice, **noted**."))
    async with serving(fake, runtime.agent.handle, workspace(runtime)):
        await fake.send_message(DM, ALICE, "hello from discord")
        await fake.wait_for(lambda: fake.sent(DM))
    [reply] = fake.sent(DM)
    assert reply["content"] == "Hello Alice, **noted**."
    [request] = fake_llm.chat_requests()
    assert "hello from discord" in str(request["messages"][-1]["content"])
    session = workspace(runtime) / "sessions" / f"discord:{DM}.jsonl"
    assert "hello from discord" in session.read_text()


async def test_stranger_never_reaches_the_llm(
    fake: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A stranger's DM makes no LLM request and gets no typing indicator."""
    async with serving(fake, runtime.agent.handle, workspace(runtime)):
        await fake.send_message(STRANGER_DM, MALLORY, "let me in")
        await barrier(fake)
    assert len(fake_llm.chat_requests()) == 1  # the barrier's own turn
    assert not fake.calls("POST", f"/channels/{STRANGER_DM}/typing")
    assert not (workspace(runtime) / "sessions" / f"discord:{STRANGER_DM}.jsonl").exists()


async def test_stop_arrives_while_a_turn_runs(
    fake: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/stop is handled while the chat's turn waits on the LLM, and cancels that turn."""
    hold = asyncio.Event()
    fake_llm.push(text("never delivered"), hold=hold)
    async with serving(fake, runtime.agent.handle, workspace(runtime)):
        await fake.send_message(DM, ALICE, "a long question")
        await fake_llm.wait_for_requests(1)
        await fake.send_message(DM, ALICE, "/stop")
        await fake.wait_for(lambda: fake.sent(DM))
        hold.set()
        await barrier(fake)
    assert [m["content"] for m in fake.sent(DM)] == ["Stopped."]
