"""The system prompt's files are looked at once a second at most, and an edit shows after that;
a turn whose tools wrote a file shows the new text in the very next turn."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

from gateway.agent.context import ContextBuilder
from gateway.service.app import Runtime
from gateway.tools.scope import private_scope
from memory.files import MemoryFiles
from tests.conftest import inbound
from tests.fakes.llm import FakeLLM, text, tool_call


class Clock:
    """Time that moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def builder(workspace: Path, clock: Clock) -> ContextBuilder:
    return ContextBuilder(workspace, MemoryFiles(workspace, UTC), UTC, clock=clock)


async def test_an_edit_shows_once_the_recheck_interval_has_passed(tmp_path: Path) -> None:
    """Within a second of the last look the cached prompt is kept; after it, the edit is in."""
    clock = Clock()
    context = builder(tmp_path, clock)
    (tmp_path / "SOUL.md").write_text("calm\n", encoding="utf-8")
    assert "calm" in await context.system_prompt(private_scope())
    (tmp_path / "SOUL.md").write_text("cheerful and much longer\n", encoding="utf-8")
    clock.now += 0.5
    assert "calm" in await context.system_prompt(private_scope())
    clock.now += 0.5
    prompt = await context.system_prompt(private_scope())
    assert "cheerful and much longer" in prompt and "calm" not in prompt


async def test_unchanged_files_keep_the_same_prompt_across_rechecks(tmp_path: Path) -> None:
    """A recheck that finds nothing new hands back the very same text (no render)."""
    clock = Clock()
    context = builder(tmp_path, clock)
    await context.system_prompt(private_scope())  # creates MEMORY.md from its template
    clock.now += 5
    first = await context.system_prompt(private_scope())
    clock.now += 5
    assert await context.system_prompt(private_scope()) is first


async def test_files_changed_looks_again_at_once(tmp_path: Path) -> None:
    """After `files_changed()` the next prompt reads the files without waiting for the interval."""
    clock = Clock()
    context = builder(tmp_path, clock)
    await context.system_prompt(private_scope())
    (tmp_path / "AGENTS.md").write_text("always answer in French\n", encoding="utf-8")
    context.files_changed()
    assert "always answer in French" in await context.system_prompt(private_scope())


async def test_a_tool_write_to_memory_is_in_the_next_turns_prompt(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """MEMORY.md written by the agent's tool is in the system prompt of the turn right after."""
    await runtime.agent.handle(inbound("hello"))
    fake_llm.push(tool_call("write_file", {"path": "memory/MEMORY.md", "content": "likes tea\n"}))
    fake_llm.push(text("noted"))
    await runtime.agent.handle(inbound("remember that I like tea"))
    await runtime.agent.handle(inbound("what do I like?"))
    assert "likes tea" in fake_llm.chat_requests()[-1]["messages"][0]["content"]
