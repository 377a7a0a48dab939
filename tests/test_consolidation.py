"""Background consolidation against the fake LLM: triggers, results, failures and races."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

from gateway.service.app import Runtime
from memory.sessions.store import SessionStore
from tests.conftest import RuntimeFactory, history_entries, inbound, markers, turns
from tests.fakes.llm import (
    FakeLLM,
    conversation_lines,
    error,
    is_consolidation,
    last_user_text,
    text,
    tool_call,
)

STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ", re.M)


def no_retry_delay(runtime: Runtime) -> None:
    consolidator = runtime.consolidator
    consolidator.settings = dataclasses.replace(consolidator.settings, retry_delay=0)


async def test_below_every_threshold_nothing_is_sent(runtime: Runtime, fake_llm: FakeLLM) -> None:
    """A few short turns trigger no consolidation request at all."""
    await turns(runtime, 10)
    await runtime.consolidator.wait_idle()
    assert fake_llm.consolidation_requests() == []
    assert runtime.memory.read_history() == ""


async def test_window_trigger_writes_history_memory_version_and_marker(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """window: 10 gives one request at 10 messages, ending at a user boundary, with every result."""
    async with make_runtime({"memory": {"window": 10}}) as runtime:
        template = runtime.memory.read_memory()
        await turns(runtime, 5)
        await runtime.consolidator.wait_idle()
        requests = fake_llm.consolidation_requests()
        assert len(requests) == 1
        request = requests[0]
        assert request["tool_choice"] == {"type": "function", "function": {"name": "save_memory"}}
        assert request["messages"][0]["content"].startswith("You are a memory consolidation agent.")
        lines = conversation_lines(request)
        # 10 messages, keep window // 2 = 5: the cut moves forward to the next user message.
        assert len(lines) == 6 and "ASSISTANT:" in lines[-1]
        entries = history_entries(runtime)
        assert len(entries) == 1 and STAMP.match(entries[0])
        assert runtime.memory.read_memory().endswith("- Fact from 6 messages\n")
        versions = runtime.memory.list_versions()
        assert [v.read_text() for v in versions] == [template]
        assert markers(runtime.sessions.path_for("test:42")) == [6]


async def test_token_budget_consolidates_down_to_target_in_few_chunks(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A session far over a small budget is consolidated to consolidate_to in at most 5 chunks."""
    store = SessionStore(tmp_path / "workspace" / "sessions", UTC)
    session = await store.get("test:42")
    backlog = []
    for index in range(80):
        backlog.append({"role": "user", "content": f"question {index} " + "words " * 60})
        backlog.append({"role": "assistant", "content": f"answer {index} " + "more " * 60})
    await store.add_messages(session, backlog)
    overrides = {"llm": {"context_window": 6144, "max_tokens": 1024}, "memory": {"window": 1000}}
    async with make_runtime(overrides) as runtime:
        await runtime.agent.handle(inbound("one more question"))
        await runtime.consolidator.wait_idle()
        session = await runtime.sessions.get("test:42")
        system = fake_llm.chat_requests()[-1]["messages"][0]
        estimate = runtime.counter.count_message(system) + session.tokens_between(
            session.last_consolidated, len(session.messages), runtime.counter
        )
        budget = runtime.config.llm.budget
        assert session.tokens_between(0, len(session.messages), runtime.counter) > 2 * budget
        assert estimate <= 0.5 * budget
        assert 2 <= len(fake_llm.consolidation_requests()) <= 5
        assert runtime.consolidator.runs == 1
        assert markers(runtime.sessions.path_for("test:42"))[-1] == session.last_consolidated


async def test_replies_flow_while_a_consolidation_call_is_held(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Held consolidations block no reply, and every chat prompt meanwhile stays in the budget."""
    release = asyncio.Event()
    for _ in range(4):
        fake_llm.push(tool_call("save_memory", {}), hold=release, match=is_consolidation)
    overrides = {"memory": {"window": 4}, "llm": {"context_window": 4096, "max_tokens": 1024}}
    async with make_runtime(overrides) as runtime:
        no_retry_delay(runtime)
        await turns(runtime, 2, "1")
        await turns(runtime, 2, "2")
        await fake_llm.wait_for_requests(2, kind="consolidation")
        chats_before = len(fake_llm.chat_requests())
        await asyncio.gather(turns(runtime, 5, "1"), turns(runtime, 5, "2"))
        assert len(fake_llm.chat_requests()) == chats_before + 10
        assert fake_llm.in_flight == 2 and not release.is_set()
        for request in fake_llm.chat_requests():
            total = sum(runtime.counter.count_message(m) for m in request["messages"])
            assert (
                total + runtime.counter.count_tools(request["tools"]) <= runtime.config.llm.budget
            )
        fake_llm.steps.clear()
        release.set()
        await runtime.consolidator.wait_idle()


async def test_forced_tool_choice_rejected_is_retried_with_auto(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A 400 about tool_choice is followed by exactly one retry with tool_choice auto."""
    fake_llm.push(error(400, "tool_choice 'required' is not supported"), match=is_consolidation)
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        await turns(runtime, 2)
        await runtime.consolidator.wait_idle()
        requests = fake_llm.consolidation_requests()
        assert [r["tool_choice"] for r in requests] == [
            {"type": "function", "function": {"name": "save_memory"}},
            "auto",
        ]
        assert len(history_entries(runtime)) == 1


async def test_arguments_as_json_string_or_list_are_accepted(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """save_memory arguments given as a JSON string or a one-element list both work."""
    body = {"history_entry": "Talked about tea.", "memory_update": "# Long-term Memory\n\n- tea\n"}
    fake_llm.push(tool_call("save_memory", json.dumps(json.dumps(body))), match=is_consolidation)
    second = {**body, "history_entry": "[2026-02-03 04:05] Talked about coffee."}
    fake_llm.push(tool_call("save_memory", json.dumps([second])), match=is_consolidation)
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        await turns(runtime, 2)
        await runtime.consolidator.wait_idle()
        await turns(runtime, 1)
        await runtime.consolidator.wait_idle()
        entries = history_entries(runtime)
        assert len(entries) == 2
        assert STAMP.match(entries[0]) and entries[0].endswith("Talked about tea.")
        assert entries[1] == "[2026-02-03 04:05] Talked about coffee."
        assert runtime.memory.read_memory() == "# Long-term Memory\n\n- tea\n"


async def test_empty_memory_update_writes_nothing(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """An empty memory_update is a failure: no history, no MEMORY.md change, pointer unchanged."""
    bad = {"history_entry": "[2026-01-01 10:00] BAD ENTRY", "memory_update": ""}
    fake_llm.push(tool_call("save_memory", bad), match=is_consolidation)
    release = asyncio.Event()
    good = {"history_entry": "[2026-01-01 10:01] good", "memory_update": "# Long-term Memory\n"}
    fake_llm.push(tool_call("save_memory", good), match=is_consolidation, hold=release)
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        no_retry_delay(runtime)
        before = runtime.memory.read_memory()
        await turns(runtime, 2)
        await fake_llm.wait_for_requests(2, kind="consolidation")
        session = await runtime.sessions.get("test:42")
        assert session.last_consolidated == 0
        assert runtime.memory.read_memory() == before
        assert runtime.memory.read_history() == ""
        release.set()
        await runtime.consolidator.wait_idle()
        assert history_entries(runtime) == ["[2026-01-01 10:01] good"]
        assert session.last_consolidated == 2


async def test_three_failures_write_one_raw_entry_and_move_the_pointer(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """After three failed calls the chunk goes to HISTORY.md as [RAW] and the pointer moves."""
    for _ in range(3):
        fake_llm.push(error(500, "down"), match=is_consolidation)
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        no_retry_delay(runtime)
        await turns(runtime, 2)
        await runtime.consolidator.wait_idle()
        entries = history_entries(runtime)
        assert len(entries) == 1
        assert re.match(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] \[RAW\] 2 messages\n", entries[0])
        assert "USER: chat 42 turn 0" in entries[0]
        assert markers(runtime.sessions.path_for("test:42")) == [2]
        assert len(fake_llm.consolidation_requests()) == 3


async def test_failure_counts_are_per_session(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Two failures in each of two sessions never add up to a [RAW] entry."""

    def for_chat(chat: str) -> Callable[[dict[str, Any]], bool]:
        return lambda body: is_consolidation(body) and f"chat {chat} turn" in last_user_text(body)

    for chat in ("1", "2"):
        for _ in range(2):
            fake_llm.push(error(503, "busy"), match=for_chat(chat))
    # One worker: two sessions consolidating at once would each see the other's MEMORY.md write
    # and merge again (by design), which would blur the request count this test is about.
    async with make_runtime({"memory": {"window": 4, "workers": 1}}) as runtime:
        no_retry_delay(runtime)
        await turns(runtime, 2, "1")
        await turns(runtime, 2, "2")
        await runtime.consolidator.wait_idle()
        entries = history_entries(runtime)
        assert len(entries) == 2 and not any("[RAW]" in e for e in entries)
        assert len(fake_llm.consolidation_requests()) == 6


async def test_memory_edit_during_a_held_call_survives(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A write_file to MEMORY.md made while consolidation is held is merged again, not lost."""
    release = asyncio.Event()
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        stale = runtime.memory.read_memory()
        answer = {
            "history_entry": "[2026-01-01 10:00] x",
            "memory_update": stale + "- STALE MERGE\n",
        }
        fake_llm.push(tool_call("save_memory", answer), hold=release, match=is_consolidation)
        await turns(runtime, 2)
        await fake_llm.wait_for_requests(1, kind="consolidation")
        edited = stale + "\n- MANUAL EDIT: the user's cat is called Miso\n"
        fake_llm.push(tool_call("write_file", {"path": "memory/MEMORY.md", "content": edited}))
        fake_llm.push(text("Noted."))
        await runtime.agent.handle(inbound("remember my cat"))
        assert "MANUAL EDIT" in runtime.memory.read_memory()
        release.set()
        await runtime.consolidator.wait_idle()
        final = runtime.memory.read_memory()
        assert "MANUAL EDIT: the user's cat is called Miso" in final
        assert "STALE MERGE" not in final and "- Fact from 2 messages" in final
        requests = fake_llm.consolidation_requests()
        assert len(requests) == 2 and "MANUAL EDIT" in last_user_text(requests[1])
        assert len(history_entries(runtime)) == 1
