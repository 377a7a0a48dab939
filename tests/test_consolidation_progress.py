"""What `memgate memory consolidate` shows while it works: no wait before a chunk that failed
three times is kept raw."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

from memory.consolidation.consolidator import Job
from memory.sessions.store import SessionStore
from tests.conftest import RuntimeFactory
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
