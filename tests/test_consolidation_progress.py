"""What `memgate memory consolidate` shows while it works: progress over the pending messages,
reported chunk by chunk, and no wait before a chunk that failed three times is kept raw."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC
from pathlib import Path
from typing import Any

from memory.consolidation.consolidator import Job
from memory.sessions.store import SessionStore
from tests.conftest import RuntimeFactory, converse, memgate
from tests.fakes.llm import FakeLLM, Reply, error

KEY = "test:42"


async def write_session(workspace: Path, consolidated: int, pending: list[dict[str, Any]]) -> None:
    """Session KEY: `consolidated` short messages already consolidated, then `pending` ones."""
    store = SessionStore(workspace / "sessions", UTC)
    session = await store.get(KEY)
    done = [
        {"role": "user" if index % 2 == 0 else "assistant", "content": f"old {index}"}
        for index in range(consolidated)
    ]
    await store.add_messages(session, done)
    await store.mark_consolidated(session, consolidated)
    await store.add_messages(session, pending)


def turns(count: int, words: int = 1) -> list[dict[str, Any]]:
    """`count` answered turns, each message about `words` words long."""
    messages: list[dict[str, Any]] = []
    for index in range(count):
        messages.append({"role": "user", "content": f"question {index} " + "words " * words})
        messages.append({"role": "assistant", "content": f"answer {index} " + "more " * words})
    return messages


async def test_progress_counts_the_pending_messages_chunk_by_chunk(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """From 0 of the pending messages before the first call, up by each chunk, to all of them,
    across the runs of a job longer than one run's chunks, whatever was consolidated before."""
    backlog = turns(160, words=60)
    await write_session(tmp_path / "workspace", 20, backlog)
    reports: list[tuple[str, int, int]] = []
    overrides = {"llm": {"context_window": 6144, "max_tokens": 1024}, "memory": {"window": 1000}}
    async with make_runtime(overrides) as runtime:
        runtime.consolidator.progress = lambda key, done, total: reports.append((key, done, total))
        assert runtime.consolidator.enqueue(Job(KEY, KEY, everything=True))
        await runtime.consolidator.wait_idle()
    calls = len(fake_llm.consolidation_requests())
    assert calls > 5  # more than one run's chunks: the job ran again
    pending = len(backlog)
    assert reports[0] == (KEY, 0, pending) and reports[-1] == (KEY, pending, pending)
    assert len(reports) == calls + 1 and all(total == pending for _, _, total in reports)
    done = [count for _, count, _ in reports]
    assert done == sorted(set(done))  # strictly increasing: once per chunk


async def test_a_chunk_failing_three_times_is_kept_raw_without_a_third_wait(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """Two backoff waits between the three calls; the raw copy, which needs no model, follows the
    third failure at once."""
    await write_session(tmp_path / "workspace", 0, turns(3))

    def down(body: dict[str, Any]) -> Reply:
        return error(500, "down")

    fake_llm.default = down
    waits: list[float] = []

    async def record(delay: float) -> None:
        waits.append(delay)

    async with make_runtime() as runtime:
        runtime.consolidator.sleep = record
        assert runtime.consolidator.enqueue(Job(KEY, KEY, everything=True))
        await runtime.consolidator.wait_idle()
        assert "[RAW] 6 messages" in runtime.memory.read_history()
    assert len(fake_llm.requests) == 3 and len(waits) == 2


async def test_the_terminal_bar_starts_at_zero_and_counts_the_pending_messages(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """On a terminal, `memory consolidate` draws 0/10 before the model answers and ends at 10/10,
    for 10 pending messages after 20 consolidated ones."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    config = home / "config.yaml"
    config.write_text(config.read_text().replace("https://api.openai.com/v1", fake_llm.url))
    await write_session(home / "workspace", 20, turns(5))
    env = {**os.environ, "MEMGATE_HOME": str(home), "OPENAI_API_KEY": "sk-cli-test-key-123456"}
    args = ["memory", "consolidate", "--session", KEY]
    code, output = await asyncio.to_thread(converse, args, [], env)
    assert code == 0, output
    assert "0/10 messages" in output and "10/10 messages" in output
    assert "/30" not in output
