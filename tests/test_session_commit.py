"""Group commit of session appends: one thread hop for the appends of one loop iteration."""

from __future__ import annotations

import asyncio
from datetime import UTC
from pathlib import Path

import pytest

from memory.session_file import file_name, parse_session_bytes
from memory.sessions import SessionStore


async def test_concurrent_appends_to_different_sessions_share_one_commit(tmp_path: Path) -> None:
    """Appends to ten sessions made at once go to disk in one batch, and each is whole on return."""
    store = SessionStore(tmp_path, UTC)
    sessions = [await store.get(f"t:{n}") for n in range(10)]
    before = store.commits.batches

    async def turn(n: int) -> None:
        await store.add_messages(sessions[n], [{"role": "user", "content": f"hi {n}"}])
        # Appended before the turn goes on: the file already holds the line.
        data = (tmp_path / file_name(f"t:{n}")).read_bytes()
        assert [m["content"] for m in parse_session_bytes(data).messages] == [f"hi {n}"]

    await asyncio.gather(*(turn(n) for n in range(10)))
    assert store.commits.batches - before == 1
    assert store.commits.appends >= 10


async def test_one_failing_append_fails_alone(tmp_path: Path) -> None:
    """An append that cannot be written raises for its own session; the others in its batch land."""
    store = SessionStore(tmp_path, UTC)
    good = await store.get("t:good")
    bad = await store.get("t:bad")
    (tmp_path / file_name("t:bad")).mkdir()  # the session's file name is taken by a folder
    results = await asyncio.gather(
        store.add_messages(good, [{"role": "user", "content": "kept"}]),
        store.add_messages(bad, [{"role": "user", "content": "lost"}]),
        return_exceptions=True,
    )
    assert results[0] is None and isinstance(results[1], IsADirectoryError)
    assert [m["content"] for m in good.messages] == ["kept"]
    assert len(bad.messages) == 0
    reloaded = await SessionStore(tmp_path, UTC).get("t:good")
    assert [m["content"] for m in reloaded.messages] == ["kept"]


async def test_a_cancelled_turn_still_records_what_it_appended(tmp_path: Path) -> None:
    """A turn cancelled while its lines are being written leaves its session in step with the file."""
    store = SessionStore(tmp_path, UTC)
    session = await store.get("t:1")
    task = asyncio.ensure_future(store.add_messages(session, [{"role": "user", "content": "a"}]))
    await asyncio.sleep(0)  # the append is submitted; its batch leaves at the end of this iteration
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    on_disk = parse_session_bytes((tmp_path / file_name("t:1")).read_bytes()).messages
    assert [m["content"] for m in session.messages] == [m["content"] for m in on_disk] == ["a"]
    await store.add_messages(session, [{"role": "user", "content": "b"}])
    reloaded = await SessionStore(tmp_path, UTC).get("t:1")
    assert [m["content"] for m in reloaded.messages] == ["a", "b"]
