"""Loading a long session from its consolidation pointer through the index beside its file."""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.agent.replay import ReplayAction, find_replay
from memory.errors import HistoryNotLoadedError
from memory.sessions.file import Loaded, file_name, parse_session_bytes
from memory.sessions.index import index_path, load_session, owed_among, trim
from memory.sessions.store import SessionStore, history_window

KEY = "t:1"


class CharCounter:
    """Counts a message as its characters."""

    def count_message(self, message: dict[str, Any]) -> int:
        return len(message.get("content") or "") + 1


def _turns(count: int, first: int = 0) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}", "message_id": f"id{i}"}
        for i in range(first, first + count)
    ]


async def _long_session(root: Path, count: int, pointer: int, keep: int = 200) -> SessionStore:
    store = SessionStore(root, UTC, keep_recent=keep)
    session = await store.get(KEY)
    await store.add_messages(session, _turns(count))
    await store.mark_consolidated(session, pointer)
    return store


async def test_a_long_session_loads_from_its_pointer_without_reading_what_came_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a marker, a new store loads only the recent part: the consolidated lines are never parsed."""
    await _long_session(tmp_path, 1000, 990)
    path = tmp_path / file_name(KEY)
    data = bytearray(path.read_bytes())
    # Garble a consolidated line in place (same length): reading it would log a corrupt line.
    lines = bytes(data).split(b"\n")
    at = sum(len(line) + 1 for line in lines[:50])
    data[at : at + len(lines[50])] = b"x" * len(lines[50])
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING, logger="memory"):
        session = await SessionStore(tmp_path, UTC).get(KEY)
    assert not caplog.records
    assert (session.messages.base, len(session.messages), session.last_consolidated) == (
        800,
        1000,
        990,
    )
    assert session.messages[-1]["content"] == "m999" and session.messages[800]["content"] == "m800"
    with pytest.raises(HistoryNotLoadedError):
        session.messages[799]
    window = history_window(session, CharCounter(), 10_000)
    assert [m["content"] for m in window] == [f"m{i}" for i in range(990, 1000)]


async def test_without_an_index_the_whole_file_is_read_once_and_the_index_written(
    tmp_path: Path,
) -> None:
    """A file with no index (as older versions left it) loads whole, then gets its index."""
    await _long_session(tmp_path, 300, 250)
    path = tmp_path / file_name(KEY)
    index_path(path).unlink()
    session = await SessionStore(tmp_path, UTC).get(KEY)
    assert (session.messages.base, len(session.messages), session.last_consolidated) == (
        100,
        300,
        250,
    )
    assert json.loads(index_path(path).read_text())["base"] == 100


@pytest.mark.parametrize(
    "damage", ["truncated", "rewritten", "garbage index", "deep index", "pointer back"]
)
async def test_a_stale_or_wrong_index_falls_back_to_the_whole_file(
    tmp_path: Path, damage: str
) -> None:
    """An index that no longer describes its file is not trusted: the session loads as a whole read gives it."""
    await _long_session(tmp_path, 400, 390)
    path = tmp_path / file_name(KEY)
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    if damage == "truncated":
        path.write_bytes(b"".join(lines[:-3]))
    elif damage == "rewritten":  # an editor dropped an early message, then the file grew again
        path.write_bytes(b"".join([lines[0], *lines[2:], *lines[-3:]]))
    elif damage == "garbage index":
        index_path(path).write_text("{not json")
    elif damage == "deep index":  # nested past what the JSON decoder recurses through
        index_path(path).write_text("[" * 100_000 + "]" * 100_000)
    else:  # a hand-written marker moves the pointer back before the loaded part
        back = {"_type": "consolidated", "last_consolidated": 5, "timestamp": "x"}
        path.write_bytes(data + json.dumps(back).encode() + b"\n")
    expected = trim(parse_session_bytes(path.read_bytes()))
    session = await SessionStore(tmp_path, UTC).get(KEY)
    assert session.messages.base == expected.base
    assert session.messages.loaded == expected.messages
    assert session.last_consolidated == expected.last_consolidated
    assert len(session.messages) == expected.base + len(expected.messages)


async def test_an_answer_owed_before_the_loaded_part_is_still_owed_after_a_restart(
    tmp_path: Path,
) -> None:
    """A stored answer never delivered stays owed when it falls before the loaded part, until marked."""
    store = SessionStore(tmp_path, UTC, keep_recent=10)
    session = await store.get(KEY)
    await store.add_messages(session, [{"role": "user", "content": "q"}])
    await store.add_messages(session, [{"role": "assistant", "content": "a", "reply_id": "r1"}])
    await store.add_messages(session, [{"role": "assistant", "content": "b", "reply_id": "r2"}])
    await store.mark_delivered(session, "r2")
    await store.add_messages(session, _turns(100))
    await store.mark_consolidated(session, 100)

    reloaded = await SessionStore(tmp_path, UTC, keep_recent=10).get(KEY)
    assert reloaded.messages.base == 93
    assert [m["content"] for m in reloaded.owed()] == ["a"]
    fresh = SessionStore(tmp_path, UTC, keep_recent=10)
    again = await fresh.get(KEY)
    await fresh.mark_delivered(again, "r1")
    assert (await SessionStore(tmp_path, UTC, keep_recent=10).get(KEY)).owed() == []


async def test_a_replayed_message_among_the_recent_ones_is_found_after_a_restart(
    tmp_path: Path,
) -> None:
    """Replay dedupe still finds a message stored just before the pointer: the recent ones are loaded."""
    await _long_session(tmp_path, 1000, 1000)
    session = await SessionStore(tmp_path, UTC).get(KEY)
    replay = find_replay(session, "id900")
    assert replay is not None and replay.action is ReplayAction.ANSWERED and replay.index == 900


async def test_a_torn_tail_after_the_index_is_ignored_then_repaired(tmp_path: Path) -> None:
    """A crash mid-line after the indexed part loads without that line, and the next append repairs it."""
    await _long_session(tmp_path, 300, 290)
    path = tmp_path / file_name(KEY)
    with path.open("ab") as handle:
        handle.write(b'{"role":"user","content":"cut sh')
    store = SessionStore(tmp_path, UTC)
    session = await store.get(KEY)
    assert len(session.messages) == 300 and session.messages.base == 100
    await store.add_messages(session, [{"role": "user", "content": "after"}])
    whole = parse_session_bytes(path.read_bytes())
    assert [m["content"] for m in whole.messages[-2:]] == ["m299", "after"]
    assert path.read_bytes().endswith(b"\n")


# -- property: an indexed load is the whole file's load, from (at most) the same base ----------------
operations = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.text(max_size=20)),
        st.tuples(st.just("answer"), st.text(max_size=20)),
        st.tuples(st.just("deliver"), st.integers(min_value=0, max_value=30)),
        st.tuples(st.just("marker"), st.integers(min_value=0, max_value=3)),
    ),
    max_size=30,
)


async def _apply(store: SessionStore, ops: list[tuple[str, Any]], serial: list[int]) -> None:
    session = await store.get(KEY)
    for kind, value in ops:
        if kind == "user":
            await store.add_messages(session, [{"role": "user", "content": value}])
        elif kind == "answer":
            serial[0] += 1
            answer = {"role": "assistant", "content": value, "reply_id": f"r{serial[0]}"}
            await store.add_messages(session, [answer])
        elif kind == "deliver":
            if value <= serial[0]:  # an answer is marked delivered only once it is stored
                await store.mark_delivered(session, f"r{value}")
        else:  # the pointer only moves forward, by up to `value` messages
            pointer = min(len(session.messages), session.last_consolidated + value)
            await store.mark_consolidated(session, pointer)


def _owed(loaded: Loaded) -> list[str]:
    return [
        m["reply_id"]
        for m in owed_among([*loaded.earlier_owed, *loaded.messages], loaded.delivered)
    ]


@settings(max_examples=80, deadline=None)
@given(operations, operations, st.integers(min_value=0, max_value=4), st.integers(min_value=0))
def test_an_indexed_load_matches_the_whole_file(
    first: list[tuple[str, Any]], then: list[tuple[str, Any]], keep: int, cut: int
) -> None:
    """Across restarts, appends, markers and a cut at any byte, the indexed load agrees with a whole read."""

    async def scenario(root: Path) -> None:
        serial = [0]
        await _apply(SessionStore(root, UTC, keep_recent=keep), first, serial)
        await _apply(SessionStore(root, UTC, keep_recent=keep), then, serial)
        path = root / file_name(KEY)
        if path.exists() and cut % 3 == 0:  # a crash cut the file somewhere
            data = path.read_bytes()
            path.write_bytes(data[: cut % (len(data) + 1)])
        data = path.read_bytes() if path.exists() else b""
        expected = trim(parse_session_bytes(data), keep)
        loaded = load_session(path, keep)
        assert loaded.base <= expected.base
        assert loaded.messages[expected.base - loaded.base :] == expected.messages
        assert loaded.base + len(loaded.messages) == expected.base + len(expected.messages)
        assert loaded.last_consolidated == expected.last_consolidated
        assert (loaded.good_size, loaded.torn) == (expected.good_size, expected.torn)
        assert (loaded.created_at, loaded.key) == (expected.created_at, expected.key)
        assert _owed(loaded) == _owed(expected)

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp)))


async def test_a_session_loaded_from_its_start_gets_no_index(tmp_path: Path) -> None:
    """A short session is read whole anyway: neither a marker nor a load writes an index for it."""
    await _long_session(tmp_path, 50, 40)
    path = tmp_path / file_name(KEY)
    assert (await SessionStore(tmp_path, UTC).get(KEY)).messages.base == 0
    assert not index_path(path).exists()
