"""/new archival, restarts and group chats: consolidation that survives races and kills."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory, history_entries, inbound, markers, turns
from tests.fakes.llm import FakeLLM, conversation_lines, is_consolidation, text, tool_call


def archived(runtime: Runtime) -> list[Path]:
    return runtime.sessions.archived_paths()


async def test_new_archives_and_consolidates_the_tail_in_the_background(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/new answers at once, and the archived messages are then consolidated in full."""
    await turns(runtime, 3)
    reply = await runtime.agent.handle(inbound("/new"))
    assert reply is not None and reply.text == "New session started."
    await runtime.consolidator.wait_idle()
    [path] = archived(runtime)
    assert markers(path) == [6]
    assert len(history_entries(runtime)) == 1
    assert len(conversation_lines(fake_llm.consolidation_requests()[0])) == 6


async def test_new_while_consolidation_is_held_summarises_nothing_twice(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """/new during a held consolidation: no message is summarised twice, pointers stay in range."""
    release = asyncio.Event()
    answer = {"history_entry": "[2026-01-01 10:00] first part", "memory_update": "# M\n- a\n"}
    fake_llm.push(tool_call("save_memory", answer), hold=release, match=is_consolidation)
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        await turns(runtime, 2)
        await fake_llm.wait_for_requests(1, kind="consolidation")
        reply = await runtime.agent.handle(inbound("/new"))
        assert reply is not None and reply.text == "New session started."
        await runtime.agent.handle(inbound("fresh start"))
        fresh = fake_llm.chat_requests()[-1]["messages"]
        assert [m["role"] for m in fresh] == ["system", "user"]
        assert "fresh start" in fresh[-1]["content"]
        release.set()
        await runtime.consolidator.wait_idle()
        seen: list[str] = []
        for request in fake_llm.consolidation_requests():
            seen += [line.split("] ", 1)[1] for line in conversation_lines(request)]
        assert len(seen) == len(set(seen)) == 4
        [path] = archived(runtime)
        assert markers(path) == [2, 4]
        live = await runtime.sessions.get("test:42")
        assert live.last_consolidated <= len(live.messages) == 2


async def test_group_session_keeps_memory_md_private(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A group chat gets no MEMORY.md in its prompt, and its consolidation writes only HISTORY.md."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        runtime.memory.memory_md.write_text("# Long-term Memory\n\nPRIVATE FACT\n")
        await turns(runtime, 2, "-100", is_group=True, mentioned=True)
        await runtime.consolidator.wait_idle()
        assert all("PRIVATE FACT" not in json.dumps(r["messages"]) for r in fake_llm.requests)
        [request] = fake_llm.consolidation_requests()
        assert "memory_update" not in request["tools"][0]["function"]["parameters"]["properties"]
        assert runtime.memory.read_memory() == "# Long-term Memory\n\nPRIVATE FACT\n"
        assert len(history_entries(runtime)) == 1
        metadata = json.loads(runtime.sessions.path_for("test:-100").read_text().splitlines()[0])
        assert metadata["group"] is True


async def test_shared_groups_write_memory(make_runtime: RuntimeFactory, fake_llm: FakeLLM) -> None:
    """With memory.groups: shared, a group sees MEMORY.md and its consolidation updates it."""
    async with make_runtime({"memory": {"window": 4, "groups": "shared"}}) as runtime:
        await turns(runtime, 2, "-100", is_group=True)
        await runtime.consolidator.wait_idle()
        assert "# Memory" in fake_llm.chat_requests()[0]["messages"][0]["content"]
        assert runtime.memory.read_memory().endswith("- Fact from 2 messages\n")


async def test_archival_interrupted_by_sigkill_completes_on_next_start(
    tmp_path: Path, fake_llm: FakeLLM, make_runtime: RuntimeFactory
) -> None:
    """/new, then SIGKILL while archival's call is in flight: the next start finishes it."""
    home = tmp_path / "home"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'workspace'}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  api_key: sk-x\n  max_retries: 0\n"
    )
    env = {**os.environ, "MEMGATE_HOME": str(home)}

    # An interactive chat keeps running after /new, so archival starts before the kill.
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "chat", "--config", str(config)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert process.stdin is not None
    hold = asyncio.Event()
    fake_llm.push(tool_call("save_memory", {}), hold=hold, match=is_consolidation)
    process.stdin.write(b"remember the blue door\n/new\n")
    await process.stdin.drain()
    await fake_llm.wait_for_requests(1, kind="consolidation", within=30)
    process.send_signal(signal.SIGKILL)
    await asyncio.wait_for(process.wait(), 30)
    hold.set()
    archive = tmp_path / "workspace" / "sessions" / "archive"
    [path] = list(archive.glob("*.jsonl"))
    assert markers(path) == []

    async with make_runtime() as runtime:
        await runtime.consolidator.wait_idle()
        assert markers(path) == [2]
        assert "blue door" in runtime.memory.read_history()


async def test_private_group_tools_cannot_reach_memory_or_other_chats(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """In a private-memory group, file tools refuse memory/, sessions/ and the root; no search."""
    runtime.memory.memory_md.write_text("# Long-term Memory\n\nPRIVATE OWNER FACT\n")
    await runtime.agent.handle(inbound("my private chat", chat_id="1"))
    for index, path in enumerate(["memory/MEMORY.md", "sessions/test:1.jsonl", "./memory/x"]):
        fake_llm.push(tool_call("read_file", {"path": path}, call_id=f"g{index}"))
    fake_llm.push(tool_call("list_dir", {"path": "."}, call_id="g9"))
    fake_llm.push(text("nothing to see"))
    await runtime.agent.handle(inbound("read the owner's memory", "-100", is_group=True))
    group_requests = [r for r in fake_llm.chat_requests() if "-100" in json.dumps(r["messages"])]
    offered = {t["function"]["name"] for t in group_requests[0]["tools"]}
    assert "memory_search" not in offered and "read_file" in offered
    for request in group_requests:
        assert "PRIVATE OWNER FACT" not in json.dumps(request)
        assert "my private chat" not in json.dumps(request)
    results = [m["content"] for m in group_requests[-1]["messages"] if m["role"] == "tool"]
    assert all(r.startswith("Error:") and "not available in this chat" in r for r in results)


async def test_the_first_chunk_after_new_gets_its_own_history_entry(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """After /new, the new session's first chunk (same chat, same positions) is a new entry."""
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        await turns(runtime, 2)  # the first chunk of the first session: messages 0-2
        await runtime.consolidator.wait_idle()
        assert await runtime.agent.handle(inbound("/new"))
        await runtime.consolidator.wait_idle()  # the archived session's tail
        for colour in ("red", "blue"):
            assert await runtime.agent.handle(inbound(f"after new: the {colour} bicycle"))
        await runtime.consolidator.wait_idle()
        [first, *_] = fake_llm.consolidation_requests()
        latest = fake_llm.consolidation_requests()[-1]
        assert len(conversation_lines(first)) == len(conversation_lines(latest)) == 2
        entries = history_entries(runtime)
        assert len(entries) == 3 and "after new: the red bicycle" in entries[-1], entries
