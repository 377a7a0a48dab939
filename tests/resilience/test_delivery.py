"""Every message gets its answer across a SIGKILL: interrupted tool turns resume from their stored
steps without running a tool twice, and a stored answer the kill kept from its chat is sent after
the restart, once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from memory.sessions.store import INTERRUPTED_TOOL
from tests.conftest import memgate
from tests.fakes.llm import FakeLLM, is_consolidation, text, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import SECRETS, read_sessions, until


def _chat(body: dict[str, Any]) -> bool:
    return not is_consolidation(body)


def _answers(fake_telegram: FakeTelegram, text_: str) -> int:
    return sum(1 for p in fake_telegram.sent() if p.get("plain") == text_)


@pytest.mark.timeout(90)
async def test_a_kill_after_a_tool_result_resumes_without_running_the_tool_again(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed after a tool's result is stored, the turn is answered once and the tool ran once."""
    gateway = make_gateway()
    await gateway.start()
    # edit_file adds " ran" after "runs:" each time it runs, so the file counts the runs.
    (gateway.workspace / "runs.md").write_text("runs:")
    edit = {"path": "runs.md", "old_text": "runs:", "new_text": "runs: ran"}
    fake_llm.push(tool_call("edit_file", edit), match=_chat)
    release = asyncio.Event()
    fake_llm.push(text("lost with the process"), hold=release, match=_chat)
    fake_telegram.message("count one run")
    await fake_llm.wait_for_requests(2, kind="chat", within=20)  # the result is stored by now
    await gateway.kill()
    release.set()
    fake_llm.push(text("the run is counted"), match=_chat)
    await gateway.start()
    await until(
        lambda: _answers(fake_telegram, "the run is counted") == 1, 30, "the resumed answer"
    )
    await gateway.stop()
    assert (gateway.workspace / "runs.md").read_text() == "runs: ran"
    assert _answers(fake_telegram, "the run is counted") == 1
    resumed = fake_llm.chat_requests()[2]["messages"]
    assert [m["role"] for m in resumed[-3:]] == ["user", "assistant", "tool"]
    assert "lost with the process" not in [p.get("plain") for p in fake_telegram.sent()]


@pytest.mark.timeout(90)
async def test_a_kill_during_a_tool_answers_that_the_step_was_interrupted(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed while a tool runs, the turn is answered after the restart with the tool's result
    saying it was interrupted, and the tool is not run again."""
    embeddings = {"base_url": fake_llm.url, "api_key": "sk-fake"}
    gateway = make_gateway({"memory": {"embeddings": embeddings}})
    await gateway.start()
    fake_llm.embedding_hold = asyncio.Event()  # memory_search embeds: it blocks
    before = len(fake_llm.embedding_requests)
    fake_llm.push(tool_call("memory_search", {"query": "where is my cat"}), match=_chat)
    fake_telegram.message("find my cat")

    def queries() -> int:
        return sum("where is my cat" in json.dumps(r["input"]) for r in fake_llm.embedding_requests)

    def called() -> bool:
        stored = [m for f in read_sessions(gateway.workspace) for m in f.messages]
        return any(m.get("tool_calls") for m in stored)

    # The call is stored before the tool runs, and the tool waits for the held embeddings.
    await until(
        lambda: called() and len(fake_llm.embedding_requests) > before,
        20,
        "the search tool to block on its embeddings request",
    )
    await gateway.kill()
    hold, fake_llm.embedding_hold = fake_llm.embedding_hold, None
    hold.set()

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        tool = body["messages"][-1]
        said = tool["content"] if tool["role"] == "tool" else "no tool result"
        return text(f"about your search: {said}")

    fake_llm.push(answer, match=_chat)
    await gateway.start()
    expected = f"about your search: {INTERRUPTED_TOOL}"
    await until(lambda: _answers(fake_telegram, expected) == 1, 30, "the interrupted-step answer")
    await gateway.stop()
    # Blocked before it embedded the query, the search never got that far: not even after the
    # restart, so it did not run again.
    assert queries() == 0
    stored = [m for f in read_sessions(gateway.workspace) for m in f.messages]
    assert sum(len(m.get("tool_calls") or []) for m in stored) == 1
    assert _answers(fake_telegram, expected) == 1


@pytest.mark.timeout(90)
async def test_a_kill_between_storing_and_sending_an_answer_sends_it_after_restart(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """An answer stored but not yet taken by Telegram when the process dies reaches the chat
    once after the restart, without asking the model again."""
    gateway = make_gateway()
    await gateway.start()
    with fake_telegram.sends_unanswered() as arrived:
        fake_llm.push(text("the owed answer"), match=_chat)
        fake_telegram.message("what do I owe?")
        await asyncio.wait_for(arrived.wait(), 20)
        sessions = read_sessions(gateway.workspace)
        assert "the owed answer" in [t for s in sessions for t in s.texts("assistant")]
        await gateway.kill()
    await gateway.start()
    await until(lambda: _answers(fake_telegram, "the owed answer") == 1, 30, "the owed answer")
    fake_telegram.message("and now?")
    await until(lambda: _answers(fake_telegram, "echo: and now?") == 1, 30, "the next answer")
    await gateway.stop()
    assert _answers(fake_telegram, "the owed answer") == 1
    assert len(fake_llm.chat_requests()) == 2  # the owed answer was not asked for again


@pytest.mark.timeout(90)
async def test_a_kill_between_two_pieces_of_an_answer_sends_only_the_rest_after_restart(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """An answer too long for one Telegram message, cut by a kill after its first piece was
    taken: after the restart the second piece is sent, and the first is not sent again."""
    first, second = "a" * 3000, "b" * 3000
    gateway = make_gateway()
    await gateway.start()
    with fake_telegram.sends_unanswered(after=1) as arrived:
        fake_llm.push(text(f"{first}\n\n{second}"), match=_chat)
        fake_telegram.message("tell me everything")
        await asyncio.wait_for(arrived.wait(), 20)
        assert _answers(fake_telegram, first) == 1
        await gateway.kill()
    await gateway.start()
    await until(lambda: _answers(fake_telegram, second) == 1, 30, "the second piece")
    fake_telegram.message("and now?")
    await until(lambda: _answers(fake_telegram, "echo: and now?") == 1, 30, "the next answer")
    await gateway.stop()
    assert (_answers(fake_telegram, first), _answers(fake_telegram, second)) == (1, 1)
    assert len(fake_llm.chat_requests()) == 2  # the stored answer was not asked for again


@pytest.mark.timeout(90)
async def test_status_after_a_kill_counts_the_received_message_that_waits(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed while the model was still answering, `memgate status` counts the message waiting in
    the inbox to be answered at the next start; once answered, it counts none."""
    gateway = make_gateway()
    await gateway.start()
    release = asyncio.Event()
    fake_llm.push(text("lost with the process"), hold=release, match=_chat)
    fake_telegram.message("are you there?")
    await fake_llm.wait_for_requests(1, kind="chat", within=20)
    await gateway.kill()
    release.set()
    args = ("status", "--config", str(gateway.config_path))
    code, out, err = await memgate(*args, home=gateway.home, env=SECRETS)
    assert code == 0, err
    assert "1 received message(s) not yet answered" in out and "received: telegram (1)" in out
    fake_llm.push(text("here I am"), match=_chat)
    await gateway.start()
    await until(lambda: _answers(fake_telegram, "here I am") == 1, 30, "the replayed answer")
    await gateway.stop()
    code, out, err = await memgate(*args, home=gateway.home, env=SECRETS)
    assert code == 0 and "0 received message(s) not yet answered" in out, err
