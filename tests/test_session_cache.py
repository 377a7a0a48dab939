"""The cache of recent sessions: bounded by the messages it holds, not only by how many chats."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

from memory.sessions.index import KEEP_RECENT
from memory.sessions.store import CACHE_MESSAGES, SessionStore


def _turns(count: int, chat: int) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"chat {chat} message {i}"}
        for i in range(count)
    ]


async def test_many_long_chats_keep_at_most_the_message_bound_in_memory(tmp_path: Path) -> None:
    """Chats that each load their last KEEP_RECENT messages: the cache drops the least recent."""
    chats = CACHE_MESSAGES // KEEP_RECENT + 20  # fewer chats than the session bound (256)
    writer = SessionStore(tmp_path, UTC)
    for chat in range(chats):
        session = await writer.get(f"t:{chat}")
        await writer.add_messages(session, _turns(KEEP_RECENT, chat), synced=False)
    store = SessionStore(tmp_path, UTC)  # a fresh process: every session is loaded from its file
    for chat in range(chats):
        await store.get(f"t:{chat}")
    held = list(store.cached())
    assert sum(len(s.messages.loaded) for s in held) <= CACHE_MESSAGES
    assert held[-1].key == f"t:{chats - 1}"  # the most recent stays
    again = await store.get("t:0")  # dropped, then loaded again whole from its file
    assert [m["content"] for m in again.messages.loaded] == [
        m["content"] for m in _turns(KEEP_RECENT, 0)
    ]


async def test_one_session_longer_than_the_bound_stays_cached(tmp_path: Path) -> None:
    """A single chat above the bound is kept: the bound never evicts the session just used."""
    store = SessionStore(tmp_path, UTC, cache_messages=10)
    session = await store.get("t:big")
    await store.add_messages(session, _turns(30, 0), synced=False)
    assert [s.key for s in store.cached()] == ["t:big"]
    assert await store.get("t:big") is session
