"""One memory writer: concurrent consolidations never lose a fact, retries never repeat history."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
from collections import Counter
from datetime import UTC
from pathlib import Path
from typing import Any

from gateway.cli.status import describe
from gateway.service.app import Runtime
from gateway.tools.files import MemorySeen, WorkspaceFiles, turn_memory
from gateway.tools.registry import ToolRegistry
from gateway.tools.scope import ScopeGuard, private_scope
from memory.consolidation.consolidator import Job
from memory.files import MemoryFiles
from memory.sessions.store import SessionStore
from tests.conftest import ManualClock, RuntimeFactory, inbound, memgate, turns
from tests.fakes.llm import (
    FakeLLM,
    is_consolidation,
    last_user_text,
    text,
    tool_call,
    tool_results,
)

CHAT = re.compile(r"chat (\S+) turn")


def fact_of(chat_id: str) -> str:
    return f"- {chat_id} likes green tea"


def merge_reply(body: dict[str, Any]) -> dict[str, Any]:
    """A save_memory call that keeps the MEMORY.md it was shown and adds its chat's own fact."""
    prompt = last_user_text(body)
    memory, _, conversation = prompt.partition("## Conversation to consolidate\n\n")
    memory = memory.removeprefix("## Current MEMORY.md\n\n").strip()
    chats = sorted(set(CHAT.findall(conversation)))
    facts = "\n".join(fact_of(chat) for chat in chats)
    return tool_call(
        "save_memory",
        {
            "history_entry": f"Talked in {', '.join(chats)}.",
            "memory_update": f"{memory}\n{facts}\n",
        },
    )


def serve_merges(body: dict[str, Any]) -> dict[str, Any]:
    return merge_reply(body) if is_consolidation(body) else text("ok")


def history_paragraphs(runtime: Runtime) -> list[str]:
    return [p for p in runtime.memory.read_history().split("\n\n") if p.strip()]


async def two_turns(runtime: Runtime, chat_id: str) -> None:
    for index in range(2):
        assert await runtime.agent.handle(inbound(f"chat {chat_id} turn {index}", chat_id))


async def test_two_chats_consolidating_together_keep_both_facts(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Two consolidation calls released together both land in MEMORY.md, 20 runs of 20."""
    fake_llm.default = serve_merges
    # Each call is held until the other arrives: on a loaded machine that may take longer than
    # the tests' usual 5 s client timeout, which is not what this test is about.
    overrides = {"memory": {"window": 4, "workers": 2}, "llm": {"timeout": 60}}
    async with make_runtime(overrides) as runtime:
        for run in range(20):
            first, second = f"a{run}", f"b{run}"
            release = asyncio.Event()
            for _ in range(2):
                fake_llm.push(merge_reply, hold=release, match=is_consolidation)
            before = len(fake_llm.consolidation_requests())
            await asyncio.gather(two_turns(runtime, first), two_turns(runtime, second))
            # Both calls are in flight, each holding the same MEMORY.md, before either answers.
            await fake_llm.wait_for_requests(before + 2, kind="consolidation")
            release.set()
            await runtime.consolidator.wait_idle()
            memory = runtime.memory.read_memory()
            assert fact_of(first) in memory and fact_of(second) in memory, f"run {run}"
            # The text between the two writes (one fact, not the other) is kept as a version.
            kept = [v.read_text() for v in runtime.memory.list_versions()]
            assert any((fact_of(first) in k) != (fact_of(second) in k) for k in kept), f"run {run}"
        assert runtime.consolidator.failures_total == 0


async def write_sessions(workspace: Path, count: int) -> list[str]:
    """`count` sessions of three turns each, written with the real store."""
    store = SessionStore(workspace / "sessions", UTC)
    keys = []
    for index in range(count):
        key = f"test:chat{index}"
        session = await store.get(key)
        messages: list[dict[str, Any]] = []
        for turn in range(3):
            messages.append({"role": "user", "content": f"chat chat{index} turn {turn}"})
            messages.append({"role": "assistant", "content": f"answer {turn}"})
        await store.add_messages(session, messages)
        keys.append(key)
    return keys


async def test_cli_consolidates_ten_sessions_with_four_workers(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """`memory consolidate --all` over 10 sessions, 4 workers: exit 0, all done, no repeats."""
    fake_llm.default = serve_merges
    home = tmp_path / "home"
    await memgate("init", home=home)
    config = home / "config.yaml"
    raw = config.read_text().replace("https://api.openai.com/v1", fake_llm.url)
    config.write_text(raw + "\nmemory:\n  workers: 4\n")
    keys = await write_sessions(home / "workspace", 10)
    env = {"OPENAI_API_KEY": "sk-cli-test-key-123456"}
    code, out, err = await memgate("memory", "consolidate", "--all", home=home, env=env)
    assert code == 0, err
    assert "consolidated 10 session(s); 0 message(s) still pending" in out
    history = (home / "workspace/memory/HISTORY.md").read_text()
    paragraphs = [p for p in history.split("\n\n") if p.strip()]
    assert len(paragraphs) == 10 and len(set(paragraphs)) == 10
    memory = (home / "workspace/memory/MEMORY.md").read_text()
    assert all(fact_of(key.partition(":")[2]) in memory for key in keys)


async def test_a_job_failing_after_its_history_append_is_retried_without_a_repeat(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """MEMORY.md's write fails once after HISTORY.md was appended: the retry appends nothing twice."""
    fake_llm.default = serve_merges
    keys = await write_sessions(tmp_path / "workspace", 10)
    async with make_runtime({"memory": {"workers": 4}}) as runtime:
        versions = runtime.memory.versions
        shutil.rmtree(versions, ignore_errors=True)
        versions.write_text("a file where the versions folder should be")
        waits: list[float] = []

        async def backoff(delay: float) -> None:
            waits.append(delay)
            if versions.is_file():  # the fault goes away while the first job backs off
                versions.unlink()

        runtime.consolidator.sleep = backoff
        for key in keys:
            runtime.consolidator.enqueue(Job(key, key, everything=True))
        await runtime.consolidator.wait_idle()
        assert waits and runtime.consolidator.failures_total >= 1
        paragraphs = history_paragraphs(runtime)
        duplicated = [p for p, n in Counter(paragraphs).items() if n > 1]
        assert duplicated == [] and len(paragraphs) == 10
        for key in keys:
            session = await runtime.sessions.get(key)
            assert session.unconsolidated == 0
        memory = runtime.memory.read_memory()
        assert all(fact_of(key.partition(":")[2]) in memory for key in keys)


async def test_an_unwritable_history_is_counted_backed_off_and_loses_nothing(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """HISTORY.md unwritable: failures counted, calls spaced by a growing backoff, all kept later."""
    fake_llm.default = serve_merges
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        consolidator = runtime.consolidator
        clock = ManualClock()
        consolidator.clock, consolidator.sleep = clock, clock.sleep
        history = runtime.memory.history_md
        history.mkdir()  # a folder where the file should be: every append fails
        await two_turns(runtime, "42")
        await consolidator.wait_idle()
        # Three model calls, each answered and each failing on HISTORY.md, then the raw copy.
        assert len(fake_llm.consolidation_requests()) == 3
        assert consolidator.failures_total == 4 and consolidator.backing_off("test:42")
        assert clock.waits[1] > clock.waits[0] * 1.3  # the waits grow
        metrics = runtime.metrics.render().decode()
        assert "memgate_consolidation_failures 4.0" in metrics
        assert "memgate_consolidation_backing_off 1.0" in metrics
        status = describe(runtime.config)  # what `memgate status` prints
        assert "consolidation: 1 session(s) failing" in status
        assert "test:42: 4 failure(s)" in status and "IsADirectoryError" in status
        # While it backs off, turns go on and pay for no consolidation call.
        for index in range(3):
            assert await runtime.agent.handle(inbound(f"chat 42 later {index}", "42"))
        await consolidator.wait_idle()
        assert len(fake_llm.consolidation_requests()) == 3
        history.rmdir()
        clock.now += runtime.consolidator.settings.max_retry_delay * 2
        assert await runtime.agent.handle(inbound("chat 42 again", "42"))
        await consolidator.wait_idle()
        session = await runtime.sessions.get("test:42")
        assert consolidator.failures_of("test:42") == 0 and not consolidator.backing_off("test:42")
        consolidated = "\n".join(history_paragraphs(runtime))
        assert "Talked in 42." in consolidated
        assert session.last_consolidated >= 4
        assert fact_of("42") in runtime.memory.read_memory()
        assert "consolidation: no failures reported" in describe(runtime.config)


async def test_a_failing_archive_is_tried_again_by_itself_after_its_backoff(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """An archive whose consolidation backs off is queued again when the backoff ends."""
    fake_llm.default = serve_merges
    async with make_runtime() as runtime:
        consolidator = runtime.consolidator
        consolidator.settings = dataclasses.replace(
            consolidator.settings, retry_delay=0.01, max_retry_delay=0.05
        )
        waits: list[float] = []

        async def no_wait(delay: float) -> None:
            waits.append(delay)  # the waits inside a job pass at once; the backoff timer does not

        consolidator.sleep = no_wait
        history = runtime.memory.history_md
        history.mkdir()
        await two_turns(runtime, "42")
        assert await runtime.agent.handle(inbound("/new", "42"))
        await consolidator.wait_idle()
        assert len(fake_llm.consolidation_requests()) == 3
        [archived] = runtime.sessions.archived_paths()
        history.rmdir()  # no await since the job ended: its retry cannot have started yet
        await fake_llm.wait_for_requests(4, kind="consolidation")
        await consolidator.wait_idle()
        session = await runtime.sessions.open_archived(archived)
        assert session.unconsolidated == 0
        assert "Talked in 42." in runtime.memory.read_history()


def rewrite_turn(body: dict[str, Any]) -> bool:
    return not is_consolidation(body) and "rewrite my memory" in last_user_text(body)


def write_back_what_was_read(body: dict[str, Any]) -> dict[str, Any]:
    """A write_file of MEMORY.md as the model's last read_file showed it, plus one note."""
    content = tool_results(body)[-1] + "- the user's cat is called Miso\n"
    return tool_call("write_file", {"path": "memory/MEMORY.md", "content": content})


async def test_a_consolidation_landing_during_a_write_file_turn_keeps_its_fact(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A consolidation landing during a write_file turn keeps its fact; a read, then a write works."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        stale = runtime.memory.read_memory()
        release = asyncio.Event()
        note = stale + "- the user's cat is called Miso\n"
        written = {"path": "memory/MEMORY.md", "content": note}
        fake_llm.push(tool_call("write_file", written), hold=release, match=rewrite_turn)
        fake_llm.push(tool_call("read_file", {"path": "memory/MEMORY.md"}), match=rewrite_turn)
        fake_llm.push(write_back_what_was_read, match=rewrite_turn)
        fake_llm.push(text("Saved."), match=rewrite_turn)
        async with asyncio.TaskGroup() as group:
            turn = group.create_task(runtime.agent.handle(inbound("rewrite my memory", "7")))
            await fake_llm.wait_for_requests(1, kind="chat")  # its prompt showed `stale`
            await turns(runtime, 2)  # another chat reaches its window and consolidates
            await runtime.consolidator.wait_idle()
            assert "- Fact from 2 messages" in runtime.memory.read_memory()
            release.set()
        assert turn.result() is not None
        refused, read, wrote = tool_results(fake_llm.chat_requests()[-1])
        assert refused.startswith("Error:") and "read it again" in refused, refused
        assert "- Fact from 2 messages" in read
        assert wrote.startswith("Wrote"), wrote
        final = runtime.memory.read_memory()
        assert "- Fact from 2 messages" in final and final.count("cat is called Miso") == 1


async def test_write_file_creates_and_replaces_other_files_as_before(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """write_file creates and replaces files other than MEMORY.md without any read first."""
    runtime.memory.write_memory("# Long-term Memory\n\nchanged before the turn\n")
    note = f"memory/{runtime.memory.today().isoformat()}.md"
    for index, (path, content) in enumerate(
        [("notes/todo.md", "one"), ("notes/todo.md", "two"), (note, "today")]
    ):
        fake_llm.push(tool_call("write_file", {"path": path, "content": content}, f"w{index}"))
    fake_llm.push(text("ok"))
    assert await runtime.agent.handle(inbound("write some files"))
    results = tool_results(fake_llm.chat_requests()[-1])
    assert all(r.startswith("Wrote") for r in results), results
    assert (runtime.memory.workspace / "notes/todo.md").read_text() == "two"
    assert (runtime.memory.workspace / note).read_text() == "today"


async def test_an_edit_of_text_the_turn_never_saw_keeps_its_older_view_refused(
    tmp_path: Path,
) -> None:
    """After edit_file changed a MEMORY.md the turn had not seen, a write of its view is refused."""
    memory = MemoryFiles(tmp_path, UTC)
    memory.write_memory("# M\n- old fact\n")
    guard = ScopeGuard(private_scope(), tmp_path, tmp_path / "state")
    registry = ToolRegistry()
    for tool in WorkspaceFiles(guard, memory).tools():
        registry.add(tool)

    async def call(name: str, **arguments: str) -> str:
        return await registry.execute(name, json.dumps({"path": "memory/MEMORY.md", **arguments}))

    assert "read memory/MEMORY.md before" in await call("write_file", content="# M\n")  # no turn
    token = turn_memory.set(MemorySeen(memory.read_memory()))  # as the turn's prompt showed it
    try:
        memory.write_memory("# M\n- old fact\n- consolidated fact\n")
        assert (await call("edit_file", old_text="old", new_text="new")).startswith("Edited")
        assert "read it again" in await call("write_file", content="# M\n- new fact\n")
        assert "consolidated fact" in memory.read_memory()
        current = await call("read_file")
        written = await call("write_file", content=current + "- one more\n")
        assert written.startswith("Wrote"), written
        assert memory.read_memory() == "# M\n- new fact\n- consolidated fact\n- one more\n"
    finally:
        turn_memory.reset(token)


async def test_a_same_length_edit_during_a_held_consolidation_is_merged_again(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """An edit keeping MEMORY.md's length, made while consolidation is held, is not overwritten."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        before = "# Long-term Memory\n\n- the user's cat is called Miso\n"
        runtime.memory.write_memory(before)
        stale = {"history_entry": "[2026-01-01 10:00] x", "memory_update": before + "- STALE\n"}
        release = asyncio.Event()
        fake_llm.push(tool_call("save_memory", stale), hold=release, match=is_consolidation)
        await turns(runtime, 2)
        await fake_llm.wait_for_requests(1, kind="consolidation")
        edit = {"path": "memory/MEMORY.md", "old_text": "Miso", "new_text": "Mimi"}
        fake_llm.push(tool_call("edit_file", edit))
        fake_llm.push(text("Noted."))
        assert await runtime.agent.handle(inbound("my cat is Mimi, not Miso", "7"))
        edited = runtime.memory.read_memory()
        assert "Mimi" in edited and len(edited) == len(before)
        release.set()
        await runtime.consolidator.wait_idle()
        final = runtime.memory.read_memory()
        assert "cat is called Mimi" in final and "Miso" not in final and "STALE" not in final
        # The held merge of chat 42 was asked again, against the edited text.
        merges = [last_user_text(r) for r in fake_llm.consolidation_requests()]
        again = [m for m in merges[1:] if "chat 42 turn" in m]
        assert again and "cat is called Mimi" in again[0]
