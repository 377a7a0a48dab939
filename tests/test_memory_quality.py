"""Consolidation keeps junk out of MEMORY.md: recalls are masked, repeats dropped, big losses refused."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from gateway.cli.status import describe
from gateway.service.app import Runtime
from memory.consolidation.dedupe import UpdateCurator, UpdateRules
from memory.consolidation.recall import mask_recalls
from memory.errors import UpdateRefusedError
from memory.forgotten import normalise
from tests.conftest import RuntimeFactory, history_entries, inbound, turns
from tests.fakes.llm import (
    FakeLLM,
    conversation_lines,
    is_consolidation,
    last_user_text,
    text,
    tool_call,
)

FACT = "FACT-X the user keeps bees on the roof"


def chat_turn(body: dict[str, Any]) -> bool:
    return not is_consolidation(body)


def no_retry_delay(runtime: Runtime) -> None:
    consolidator = runtime.consolidator
    consolidator.settings = dataclasses.replace(consolidator.settings, retry_delay=0)


def update_with(extra: str) -> Any:
    """A save_memory answer: MEMORY.md as the request shows it, plus `extra`."""

    def reply(body: dict[str, Any]) -> Any:
        prompt = last_user_text(body)
        memory = prompt.partition("## Current MEMORY.md\n\n")[2]
        memory = memory.partition("\n\n## Conversation to consolidate")[0]
        arguments = {
            "history_entry": "[2026-01-01 10:00] talked",
            "memory_update": f"{memory}\n{extra}",
        }
        return tool_call("save_memory", arguments)

    return reply


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("memory_search", {"query": "bees"}),
        ("read_file", {"path": "memory/HISTORY.md"}),
        ("memory_get", {"path": "memory/HISTORY.md"}),
    ],
)
async def test_recalled_text_is_not_in_the_consolidation_request(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tool: str, arguments: dict[str, Any]
) -> None:
    """A memory tool's result is a marker in the consolidation prompt; the person's words and the
    session file keep theirs."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        runtime.memory.append_history(f"[2026-01-01 09:00] The user said {FACT}.")
        fake_llm.push(tool_call(tool, arguments), match=chat_turn)
        fake_llm.push(text("You keep bees."), match=chat_turn)
        await runtime.agent.handle(inbound("what do I keep, my own words QX-7?"))
        session = await runtime.sessions.get("test:42")
        results = [m for m in session.messages if m.get("role") == "tool"]
        assert "FACT-X" in results[0]["content"]  # the tool really returned it
        await turns(runtime, 1)
        await runtime.consolidator.wait_idle()
        requests = fake_llm.consolidation_requests()
        assert len(requests) == 1
        assert "FACT-X" not in json.dumps(requests[0])
        lines = "\n".join(conversation_lines(requests[0]))
        assert "my own words QX-7" in lines and "[recalled from memory:" in lines
        assert "not new information" in requests[0]["messages"][0]["content"]
        session = await runtime.sessions.get("test:42")
        assert "FACT-X" in next(m for m in session.messages if m.get("role") == "tool")["content"]


def test_a_read_outside_memory_is_not_masked() -> None:
    """read_file of a workspace file outside memory/ reaches consolidation as it was."""
    call = {"id": "c1", "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "plan: sail"},
    ]
    assert mask_recalls(messages)[1]["content"] == "plan: sail"


async def test_a_repeated_fact_in_other_case_and_spacing_is_kept_once(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A memory_update repeating a fact of MEMORY.md with other case and spacing writes it once,
    and status counts the line dropped."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        before = runtime.memory.read_memory() + "- The user's cat is called Miso.\n"
        runtime.memory.write_memory(before)
        fake_llm.push(update_with("-   the USER'S cat is  called miso\n"), match=is_consolidation)
        await turns(runtime, 2)
        await runtime.consolidator.wait_idle()
        memory = runtime.memory.read_memory()
        keys = [normalise(line) for line in memory.splitlines()]
        assert keys.count("the user s cat is called miso") == 1
        assert "- The user's cat is called Miso." in memory
        assert len(history_entries(runtime)) == 1
        status = describe(runtime.config)
        assert "memory updates: 1 repeated line(s) and 0 forgotten line(s) dropped" in status


async def test_an_update_dropping_most_lines_is_refused_and_retried_with_the_reason(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """An update losing most of a 30-line MEMORY.md writes nothing; the retry is told why, its
    good answer is written, and status counts the refusal."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        no_retry_delay(runtime)
        facts = "".join(f"- fact number {i} about the user\n" for i in range(30))
        runtime.memory.write_memory("# Long-term Memory\n\n" + facts)
        bad = {"history_entry": "[2026-01-01 10:00] bad", "memory_update": "# Memory\n- only\n"}
        fake_llm.push(tool_call("save_memory", bad), match=is_consolidation)
        fake_llm.push(update_with("- a new fact\n"), match=is_consolidation)
        await turns(runtime, 2)
        await runtime.consolidator.wait_idle()
        requests = fake_llm.consolidation_requests()
        assert len(requests) == 2
        assert "Your previous answer was refused" not in last_user_text(requests[0])
        assert "dropped 31 of MEMORY.md's 31 lines" in last_user_text(requests[1])
        memory = runtime.memory.read_memory()
        assert "- fact number 29 about the user" in memory and "- a new fact" in memory
        assert [e for e in history_entries(runtime) if "bad" in e] == []
        assert "0 forgotten line(s) dropped, 1 refused (last: memory_update dropped" in describe(
            runtime.config
        )


def test_a_small_memory_may_be_rewritten_and_the_share_is_configurable() -> None:
    """Under guard_from_lines the share is not checked; above it, max_drop_share decides."""
    small = "# M\n- a\n- b\n"
    assert UpdateCurator().curate(small, "# M\n- c\n") == "# M\n- c\n"
    big = "".join(f"- line {i}\n" for i in range(10))
    lenient = UpdateCurator(UpdateRules(max_drop_share=0.9, guard_from_lines=5))
    assert lenient.curate(big, "- line 0\n- line 1\n") == "- line 0\n- line 1\n"
    strict = UpdateCurator(UpdateRules(max_drop_share=0.5, guard_from_lines=5))
    with pytest.raises(UpdateRefusedError, match=r"dropped 8 of MEMORY\.md's 10 lines"):
        strict.curate(big, "- line 0\n- line 1\n")
