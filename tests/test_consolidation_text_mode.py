"""Consolidation against a server that accepts tools and ignores them, as mockllm does: a forced
call answered with text switches consolidation to JSON text for the process, and a chunk that
still ends raw is reported by `memory consolidate` and by `memgate status`."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.status import describe
from gateway.service.app import Runtime
from memory.consolidation.consolidator import Job
from memory.sessions.store import SessionStore
from tests.conftest import RuntimeFactory, memgate
from tests.fakes.llm import FakeLLM, Reply, is_text_consolidation, text

SWITCHED = "answered a forced tool call with text"


async def write_session(workspace: Path, key: str, turns: int = 3) -> None:
    """`turns` answered turns in session `key`, written as the agent would have stored them."""
    store = SessionStore(workspace / "sessions", UTC)
    session = await store.get(key)
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"{key} turn {turn}: I like green tea"})
        messages.append({"role": "assistant", "content": f"noted {turn}"})
    await store.add_messages(session, messages)


def prose(body: dict[str, Any]) -> Reply:
    """Every answer in prose, the JSON-text request's too: nothing a consolidation can use."""
    return text("Sure, I have noted all of that.")


def no_retry_delay(runtime: Runtime) -> None:
    consolidator = runtime.consolidator
    consolidator.settings = dataclasses.replace(consolidator.settings, retry_delay=0)


async def consolidate(runtime: Runtime, key: str) -> None:
    assert runtime.consolidator.enqueue(Job(key, key, everything=True))
    await runtime.consolidator.wait_idle()


async def test_a_forced_call_answered_with_text_switches_to_json_text_for_the_process(
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first forced save_memory answered with text logs one warning and is asked again at
    once as JSON text: MEMORY.md is updated, nothing goes raw, and no later call is forced."""
    fake_llm.ignores_tools = True
    for key in ("test:1", "test:2"):
        await write_session(tmp_path / "workspace", key)
    answer = {"history_entry": "Talked about tea.", "memory_update": "# Memory\n\n- likes tea\n"}
    fake_llm.push(text(json.dumps(answer)), match=is_text_consolidation)
    caplog.set_level(logging.INFO)
    async with make_runtime() as runtime:
        await consolidate(runtime, "test:1")
        memory = runtime.memory.read_memory()
        await consolidate(runtime, "test:2")
        history = runtime.memory.read_history()
        failures = runtime.consolidator.failures_total
    assert memory == "# Memory\n\n- likes tea\n"
    assert "Talked about tea." in history and "[RAW]" not in history and failures == 0
    # One forced call in the whole process; the retry and the second session ask for text.
    assert [bool(r.get("tools")) for r in fake_llm.requests] == [True, False, False]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and SWITCHED in warnings[0].getMessage()


async def test_tools_on_keeps_forcing_and_the_chunk_ends_raw(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """With `llm.tools: on` the endpoint is taken at its word: every attempt is forced, no switch."""
    fake_llm.ignores_tools = True
    await write_session(tmp_path / "workspace", "test:1")
    async with make_runtime({"llm": {"tools": "on"}}) as runtime:
        no_retry_delay(runtime)
        await consolidate(runtime, "test:1")
        assert runtime.consolidator.ended_raw == {"test:1": 1}
    assert [bool(r.get("tools")) for r in fake_llm.requests] == [True, True, True]


async def test_a_raw_ending_is_in_status_until_the_session_consolidates_again(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A chunk that ends raw even as JSON text shows in status with its cause, across a restart,
    until that session's next consolidation through the model succeeds."""
    fake_llm.ignores_tools = True
    fake_llm.default = prose
    await write_session(tmp_path / "workspace", "test:1")
    async with make_runtime() as runtime:
        no_retry_delay(runtime)
        await consolidate(runtime, "test:1")
        assert runtime.consolidator.ended_raw == {"test:1": 1}
        assert "[RAW]" in runtime.memory.read_history()
        report = describe(runtime.config)
    assert "consolidation: 1 session(s) ended raw" in report
    assert "test:1: 1 chunk(s), 6 message(s)" in report and "not JSON" in report

    fake_llm.default = None  # the JSON-text request is answered properly from now on
    await write_session(tmp_path / "workspace", "test:1")
    async with make_runtime() as runtime:
        assert "consolidation: 1 session(s) ended raw" in describe(runtime.config)
        await consolidate(runtime, "test:1")
        assert runtime.consolidator.ended_raw == {}
        assert "- Fact from 6 messages" in runtime.memory.read_memory()
        assert "consolidation: no failures reported" in describe(runtime.config)


async def test_memory_consolidate_exits_1_when_a_session_ended_raw(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """`memory consolidate` says how many sessions ended raw and exits 1; `status` names them."""
    fake_llm.ignores_tools = True
    fake_llm.default = prose
    home = tmp_path / "home"
    await memgate("init", home=home)
    config = home / "config.yaml"
    config.write_text(config.read_text().replace("https://api.openai.com/v1", fake_llm.url))
    await write_session(home / "workspace", "test:1")
    env = {"OPENAI_API_KEY": "sk-cli-test-key-123456"}
    code, out, err = await memgate(
        "memory", "consolidate", "--session", "test:1", home=home, env=env
    )
    assert code == 1, err
    assert "1 session(s) ended raw" in out and "consolidated 1 session(s)" not in out
    code, out, _ = await memgate("status", home=home, env=env)
    assert code == 0 and "consolidation: 1 session(s) ended raw" in out and "test:1" in out
