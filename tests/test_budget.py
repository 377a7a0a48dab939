"""The prompt budget holds for every provider call, and oversized files are cut, not fatal."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from memory.tokens import TokenCounter
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, is_compaction, is_consolidation, text, tool_call

# context_window - max_tokens - 1024 = 2048 tokens for the prompt.
SMALL = {"llm": {"context_window": 3328, "max_tokens": 256}}
CUT = "memgate cut this tool result"


def request_tokens(counter: TokenCounter, body: dict[str, Any]) -> int:
    """A request's size as the budget counts it: every message plus the tool schemas."""
    messages = body["messages"]
    return sum(counter.count_message(m) for m in messages) + counter.count_tools(
        body.get("tools") or []
    )


def answer_about_the_file(body: dict[str, Any]) -> dict[str, Any]:
    """The model reads the tool result it got and says whether it was whole."""
    result = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
    return text("The file was cut before I saw all of it." if CUT in result else "Read it all.")


async def test_every_call_of_a_turn_fits_a_small_budget(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A 60,000-character read_file in a 2,048-token budget: every request fits, the reply says cut."""
    async with make_runtime(SMALL) as runtime:
        (runtime.config.workspace / "big.txt").write_text("lorem ipsum dolor sit amet " * 2300)
        for index in range(3):  # some history first, which must give way too
            await runtime.agent.handle(inbound(f"warm-up message {index} " + "words " * 60))
        await runtime.consolidator.wait_idle()  # the scripted answers below are the turn's
        fake_llm.push(tool_call("read_file", {"path": "big.txt"}))
        fake_llm.push(answer_about_the_file)
        reply = await runtime.agent.handle(inbound("summarise big.txt"))
        assert reply is not None and reply.text == "The file was cut before I saw all of it."
        chats = [r for r in fake_llm.requests if not is_consolidation(r)]
        assert len(chats) == 5
        for body in chats:
            assert request_tokens(runtime.counter, body) <= 2048
        tool_results = [m for m in chats[-1]["messages"] if m.get("role") == "tool"]
        assert CUT in tool_results[0]["content"]
        assert "characters not shown" in tool_results[0]["content"]
        # The session file keeps the result as stored, not as cut for this request.
        stored = [
            m for m in (await runtime.sessions.get("test:42")).messages if m["role"] == "tool"
        ]
        assert CUT not in stored[0]["content"]


async def test_a_turn_that_cannot_fit_stops_with_a_clear_reply(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """When even cut tool results cannot fit, the turn stops and says why, without a bad call."""
    async with make_runtime(SMALL) as runtime:
        calls = {"id": None, "name": "list_dir", "arguments": "{}"}
        fake_llm.push({"tool_calls": [calls] * 1, "content": "x " * 1500})
        reply = await runtime.agent.handle(inbound("look around"))
        assert reply is not None and "I had to stop" in reply.text and "2048" in reply.text
        assert len(fake_llm.chat_requests()) == 1


async def test_a_huge_memory_file_is_cut_in_the_prompt_with_a_warning(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """A 1 MB MEMORY.md: the next turn is answered, MEMORY.md cut in the prompt, a warning names it."""
    async with make_runtime() as runtime:
        runtime.memory.memory_md.write_text(
            "# Long-term Memory\n\n" + "- The user once mentioned a detail.\n" * 29_000
        )
        assert runtime.memory.memory_md.stat().st_size > 1_000_000
        with caplog.at_level(logging.WARNING, logger="memory.budget"):
            reply = await runtime.agent.handle(inbound("hello"))
        assert reply is not None and reply.text == "echo: hello"
        assert any("memory/MEMORY.md" in r.getMessage() for r in caplog.records)
        system = fake_llm.chat_requests()[-1]["messages"][0]["content"]
        assert "memgate cut memory/MEMORY.md here" in system
        assert request_tokens(runtime.counter, fake_llm.chat_requests()[-1]) <= (
            runtime.config.llm.budget
        )


async def test_consolidation_compacts_a_huge_memory_file_keeping_its_facts(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A 1 MB MEMORY.md is compacted under max_memory_tokens; every distinct fact stays."""
    facts = [f"- Distinct fact number {i}: the user owns {i} books." for i in range(40)]
    lines = ["# Long-term Memory", ""]
    for index in range(29_000):
        lines.append("- The user once mentioned a detail.")
        if index % 725 == 0:
            lines.append(facts[index // 725])
    async with make_runtime({"memory": {"max_memory_tokens": 2000}}) as runtime:
        original = "\n".join(lines) + "\n"
        runtime.memory.memory_md.write_text(original)
        assert len(original) > 1_000_000
        assert await runtime.agent.handle(inbound("hello"))
        await runtime.consolidator.wait_idle()
        memory = runtime.memory.read_memory()
        assert runtime.counter.count(memory) <= 2000
        assert all(fact in memory for fact in facts)
        assert "- The user once mentioned a detail." in memory
        assert [v.read_text() for v in runtime.memory.list_versions()] == [original]
        compactions = [r for r in fake_llm.requests if is_compaction(r)]
        assert compactions and all(
            request_tokens(runtime.counter, r) <= runtime.config.llm.budget for r in compactions
        )


async def test_an_oversized_memory_file_is_compacted_after_a_turn_with_nothing_else_due(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """MEMORY.md over max_memory_tokens in a small chat (no message due, the prompt far from the
    budget): the turn's queued job compacts it, keeping its facts."""
    facts = [f"- Distinct fact number {i}." for i in range(3)]
    lines = ["# Long-term Memory", "", *facts, *["- The user once mentioned a detail."] * 300]
    async with make_runtime({"memory": {"max_memory_tokens": 256}}) as runtime:
        runtime.memory.memory_md.write_text("\n".join(lines) + "\n")
        assert await runtime.agent.handle(inbound("hello"))
        await runtime.consolidator.wait_idle()
        memory = runtime.memory.read_memory()
        assert runtime.counter.count(memory) <= 256
        assert all(fact in memory for fact in facts)
        assert any(is_compaction(r) for r in fake_llm.requests)
        assert not fake_llm.consolidation_requests()


async def test_a_turn_queues_a_consolidation_job_only_when_it_may_have_work(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Turns with no message due and MEMORY.md within max_memory_tokens queue no job. A
    MEMORY.md over the limit in bytes but within it in tokens is counted by one job, and not
    again until it changes."""
    async with make_runtime({"memory": {"max_memory_tokens": 256}}) as runtime:
        runtime.memory.memory_md.write_text("# Long-term Memory\n\n- The user likes tea.\n")
        for number in range(3):
            assert await runtime.agent.handle(inbound(f"hello {number}"))
        assert runtime.consolidator.jobs_queued == 0
        runtime.memory.memory_md.write_text("# Long-term Memory\n\n" + "- word " * 100 + "\n")
        assert runtime.memory.memory_md.stat().st_size > 256
        assert runtime.counter.count(runtime.memory.read_memory()) <= 256
        for number in range(3):
            assert await runtime.agent.handle(inbound(f"again {number}"))
            await runtime.consolidator.wait_idle()
        assert runtime.consolidator.jobs_queued == 1
        with runtime.memory.memory_md.open("a") as memory:
            memory.write("- one more\n")
        assert await runtime.agent.handle(inbound("after an edit"))
        assert runtime.consolidator.jobs_queued == 2
        await runtime.consolidator.wait_idle()
        assert not fake_llm.consolidation_requests()
        assert not any(is_compaction(r) for r in fake_llm.requests)


@pytest.mark.parametrize("name", ["USER.md", "daily note"])
async def test_an_oversized_bootstrap_file_or_daily_note_is_cut_not_fatal(
    name: str,
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bootstrap file or today's note over its share is cut with a marker and a named warning."""
    async with make_runtime(SMALL) as runtime:
        if name == "USER.md":
            path, shown = runtime.config.workspace / "USER.md", "USER.md"
        else:
            path = runtime.memory.daily_note_path()
            shown = f"memory/{path.name}"
        path.write_text("A line the person wrote down. " * 3000)
        with caplog.at_level(logging.WARNING, logger="memory.budget"):
            reply = await runtime.agent.handle(inbound("hello"))
        assert reply is not None and reply.text == "echo: hello"
        assert any(f"file={shown} " in r.getMessage() for r in caplog.records)
        request = fake_llm.chat_requests()[-1]
        assert f"memgate cut {shown} here" in request["messages"][0]["content"]
        assert request_tokens(runtime.counter, request) <= 2048
