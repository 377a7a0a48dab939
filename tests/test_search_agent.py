"""A model turn that calls memory_search then memory_get gets real hits and lines from the files."""

from __future__ import annotations

from tests.conftest import RuntimeFactory, inbound
from tests.corpus import line_of, write_corpus
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results


async def test_turn_searches_then_reads_the_lines(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """memory_search returns the HISTORY.md hit; memory_get at that line returns the real line."""
    async with make_runtime() as runtime:
        workspace = runtime.config.workspace
        await write_corpus(workspace)
        history = workspace / "memory" / "HISTORY.md"
        line = line_of(history, "咖啡")
        fake_llm.push(tool_call("memory_search", {"query": "咖啡", "limit": 3}, call_id="s1"))
        fake_llm.push(
            tool_call(
                "memory_get",
                {"path": "memory/HISTORY.md", "from_line": line, "lines": 1},
                call_id="g1",
            )
        )
        fake_llm.push(text("You drink coffee every morning."))
        reply = await runtime.agent.handle(inbound("我喜欢喝什么？"))
    assert reply is not None and reply.text == "You drink coffee every morning."
    first, second, third = fake_llm.chat_requests()
    assert "memory_search" in first["messages"][0]["content"]  # the system prompt mentions it
    names = [t["function"]["name"] for t in first["tools"]]
    assert {"memory_search", "memory_get"} <= set(names)
    (found,) = tool_results(second)
    assert found.startswith(f"memory/HISTORY.md:{line}  2026-01-06 08:00  history  ")
    assert "喝«咖啡»" in found
    (lines,) = tool_results(third)[1:]
    real = history.read_text(encoding="utf-8").splitlines()[line - 1]
    assert lines.splitlines()[1] == f"{line}: {real}"


async def test_consolidated_entry_is_found_by_the_next_search(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """What consolidation appends to HISTORY.md is a memory_search hit on the next turn."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        for index in range(3):
            await runtime.agent.handle(inbound(f"the quetzal is a bird, note {index}"))
        await runtime.consolidator.wait_idle()
        assert "quetzal" in runtime.memory.read_history()
        fake_llm.push(tool_call("memory_search", {"query": "quetzal"}, call_id="s1"))
        fake_llm.push(text("yes"))
        await runtime.agent.handle(inbound("what bird did I mention?"))
    found = tool_results(fake_llm.chat_requests()[-1])[-1]
    history = [line for line in found.splitlines() if line.startswith("memory/HISTORY.md:")]
    assert len(history) == 1 and "«quetzal»" in history[0]
