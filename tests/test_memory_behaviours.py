"""Memory promises that a quiet regression could break: each test fails when its promise does."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from gateway.service.app import Runtime
from memory.consolidation.entries import RAW_CAP
from tests.conftest import ManualClock, RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, error, is_consolidation, text, tool_call

RAW_HEADER = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] \[RAW\] (\d+) messages$")
TRUNCATED = re.compile(r"\n\[\.\.\. (\d+) characters truncated\]$")
ENTRY_TAG = re.compile(r"\n<!-- memgate:[0-9a-f]{16} -->$")
STAMP_WIDTH = len("[YYYY-MM-DD HH:MM]")


def file_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def history_entries(runtime: Runtime) -> list[str]:
    """HISTORY.md's entries without the chunk tag under each."""
    entries = runtime.memory.read_history().split("\n\n")
    return [ENTRY_TAG.sub("", entry) for entry in entries if entry.strip()]


async def chat(runtime: Runtime, *texts: str) -> None:
    for body in texts:
        assert await runtime.agent.handle(inbound(body)) is not None


async def test_consolidate_on_new_false_never_consolidates_the_archive(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """memory.consolidate_on_new: false: /new archives the session, and neither then nor on the
    next start is the archive consolidated."""
    overrides = {"memory": {"consolidate_on_new": False}}
    async with make_runtime(overrides) as runtime:
        await chat(runtime, "first", "second")
        reply = await runtime.agent.handle(inbound("/new"))
        assert reply is not None and reply.text == "New session started."
        await runtime.consolidator.wait_idle()
    async with make_runtime(overrides) as runtime:  # a restart derives pending work from files
        await runtime.consolidator.wait_idle()
        assert runtime.memory.read_history() == ""
    assert fake_llm.consolidation_requests() == []
    (archived,) = (tmp_path / "workspace" / "sessions" / "archive").glob("*.jsonl")
    assert not any(line.get("_type") == "consolidated" for line in file_lines(archived))
    assert [line["content"] for line in file_lines(archived) if line.get("role") == "user"] == [
        "first",
        "second",
    ]


async def test_a_success_resets_the_failure_count_and_the_backoff(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """After a failure and then a success, the session's count is 0 again: the next failure waits
    the first delay (memory retry_delay ±20%), not a doubled one."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        consolidator = runtime.consolidator
        clock = ManualClock()
        consolidator.clock, consolidator.sleep = clock, clock.sleep
        consolidator.settings = dataclasses.replace(consolidator.settings, retry_delay=10.0)
        fake_llm.push(error(500, "down"), match=is_consolidation)
        await chat(runtime, "turn 0", "turn 1")
        await consolidator.wait_idle()
        assert len(fake_llm.consolidation_requests()) == 2  # one failure, then the success
        assert consolidator.failures_of("test:42") == 0
        assert not consolidator.backing_off("test:42")
        fake_llm.push(error(500, "down again"), match=is_consolidation)
        await chat(runtime, "turn 2")  # 4 unconsolidated messages: the window is reached
        await consolidator.wait_idle()
        assert len(fake_llm.consolidation_requests()) == 4
        assert consolidator.failures_of("test:42") == 0
    first, second = clock.waits
    assert 8.0 <= first <= 12.0 and 8.0 <= second <= 12.0
    assert consolidator.failures_total == 2


async def test_a_raw_entry_keeps_its_lines_up_to_the_cap(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """After three failures the [RAW] entry holds exactly RAW_CAP characters of the chunk's lines,
    then a marker with the number of characters left out."""
    for _ in range(3):
        fake_llm.push(error(500, "down"), match=is_consolidation)
    long_texts = ["a" * 6_000, "b" * 6_000]
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        runtime.consolidator.settings = dataclasses.replace(
            runtime.consolidator.settings, retry_delay=0
        )
        await chat(runtime, *long_texts)
        await runtime.consolidator.wait_idle()
        session = await runtime.sessions.get("test:42")
        (entry,) = history_entries(runtime)
    header, _, body = entry.partition("\n")
    found = RAW_HEADER.match(header)
    assert found is not None and int(found.group(1)) == 2
    chunk = session.messages[:2]
    # Each line is "[YYYY-MM-DD HH:MM] ROLE: content", joined by newlines.
    full = sum(STAMP_WIDTH + 1 + len(m["role"]) + 2 + len(m["content"]) for m in chunk) + 1
    marker = TRUNCATED.search(body)
    assert marker is not None and int(marker.group(1)) == full - RAW_CAP
    kept = body[: marker.start()]
    assert len(kept) == RAW_CAP
    assert kept.split("\n")[0].endswith("] USER: " + long_texts[0])
    assert "] ASSISTANT: echo: aaa" in kept.split("\n")[1]


async def test_a_stored_tool_result_is_cut_at_16000_characters(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A tool result over 16,000 characters is stored as its first 16,000 and a marker naming
    how many were cut; one of exactly 16,000 is stored whole."""
    workspace = runtime.config.workspace
    (workspace / "big.txt").write_text("x" * 16_001)
    (workspace / "edge.txt").write_text("y" * 16_000)
    fake_llm.push(tool_call("read_file", {"path": "big.txt"}, call_id="big"))
    fake_llm.push(tool_call("read_file", {"path": "edge.txt"}, call_id="edge"))
    fake_llm.push(text("Both read."))
    reply = await runtime.agent.handle(inbound("Read big.txt and edge.txt"))
    assert reply is not None and reply.text == "Both read."
    stored = {
        line["tool_call_id"]: line["content"]
        for line in file_lines(runtime.sessions.path_for("test:42"))
        if line.get("role") == "tool"
    }
    assert stored["big"] == "x" * 16_000 + "\n[... 1 characters truncated]"
    assert stored["edge"] == "y" * 16_000
    # The model itself saw the whole result in that turn: only the stored copy is cut.
    seen = [m for m in fake_llm.chat_requests()[1]["messages"] if m.get("role") == "tool"]
    assert seen[-1]["content"] == "x" * 16_001
