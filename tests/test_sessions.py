"""The JSONL session store: names, format, torn tails, corrupt lines and the history window."""

from __future__ import annotations

import json
import logging
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.consolidation.failures import read_failure_report
from memory.search.searcher import MemorySearch
from memory.sessions.file import file_name, key_from_file_name, parse_session_bytes
from memory.sessions.store import SessionStore, history_window, legal_messages
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM


class CharCounter:
    """Counts a message as its characters, to make budgets easy to reason about."""

    def count_message(self, message: dict[str, Any]) -> int:
        return len(message.get("content") or "") + 1


def test_file_names_are_readable_and_reversible() -> None:
    """Plain keys keep their name; unsafe characters are percent-encoded and decode back."""
    assert file_name("telegram:42") == "telegram:42.jsonl"
    assert file_name("a/b%c\x00") == "a%2Fb%25c%00.jsonl"
    assert key_from_file_name(file_name("a/b%c\x00")) == "a/b%c\x00"


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_file_names_round_trip_and_never_collide(first: str, second: str) -> None:
    """Any two distinct keys get distinct names that decode to themselves and have no '/'."""
    assert key_from_file_name(file_name(first)) == first
    assert "/" not in file_name(first)
    if first != second:
        assert file_name(first) != file_name(second)


async def test_torn_last_line_is_ignored_then_repaired(tmp_path: Path) -> None:
    """A file cut inside its last line loads without it, and the next append leaves a valid file."""
    store = SessionStore(tmp_path, UTC)
    session = await store.get("t:1")
    await store.add_messages(session, [{"role": "user", "content": "one"}])
    await store.add_messages(session, [{"role": "assistant", "content": "two"}])
    path = store.path_for("t:1")
    data = path.read_bytes()
    path.write_bytes(data[:-12])  # crash in the middle of the assistant line

    fresh = SessionStore(tmp_path, UTC)
    reloaded = await fresh.get("t:1")
    assert [m["content"] for m in reloaded.messages] == ["one"]
    await fresh.add_messages(reloaded, [{"role": "assistant", "content": "again"}])
    lines = path.read_text().splitlines()
    assert [json.loads(line).get("content") for line in lines] == [None, "one", "again"]


async def test_corrupt_middle_line_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A garbled line in the middle is skipped and logged; the rest of the session is kept."""
    path = tmp_path / file_name("t:2")
    path.write_text(
        '{"_type":"metadata","key":"t:2","created_at":"2026-01-01T00:00:00+00:00","version":1}\n'
        '{"role":"user","content":"a"}\n'
        "{this is not json\n"
        '{"role":"assistant","content":"b"}\n'
    )
    with caplog.at_level(logging.WARNING):
        session = await SessionStore(tmp_path, UTC).get("t:2")
    assert [m["content"] for m in session.messages] == ["a", "b"]
    assert "corrupt line" in caplog.text and "line=3" in caplog.text


@given(st.integers(min_value=0, max_value=10_000))
def test_any_truncation_loads_as_a_prefix(cut: int) -> None:
    """Cutting a valid session file anywhere loads a prefix of its messages."""
    records = [{"_type": "metadata", "key": "k", "created_at": "x", "version": 1}]
    records += [{"role": "user", "content": f"message {i} ✓ 😀"} for i in range(30)]
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    full = parse_session_bytes(data).messages
    part = parse_session_bytes(data[: cut % (len(data) + 1)]).messages
    assert part == full[: len(part)]


async def test_markers_move_the_pointer_and_the_last_one_wins(tmp_path: Path) -> None:
    """Consolidation markers are appended; on load the last one sets last_consolidated."""
    store = SessionStore(tmp_path, UTC)
    session = await store.get("t:3")
    await store.add_messages(session, [{"role": "user", "content": str(i)} for i in range(6)])
    await store.mark_consolidated(session, 2)
    await store.mark_consolidated(session, 4)
    reloaded = await SessionStore(tmp_path, UTC).get("t:3")
    assert reloaded.last_consolidated == 4 and len(reloaded.messages) == 6
    with pytest.raises(ValueError):
        await store.mark_consolidated(session, 7)


async def test_cache_is_bounded_but_live_sessions_are_shared(tmp_path: Path) -> None:
    """Idle sessions are evicted past the bound; one still in use is never loaded twice."""
    store = SessionStore(tmp_path, UTC, cache_size=2)
    held = await store.get("t:held")
    for index in range(5):
        await store.get(f"t:{index}")
    assert len(list(store.cached())) == 2
    assert await store.get("t:held") is held


def test_history_window_is_legal() -> None:
    """The window starts at a user message and pairs every tool call with its result."""
    messages: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": "orphan", "content": "x"},
        {"role": "assistant", "content": "dangling"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "ok", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "lost", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "ok", "name": "f", "content": "r", "timestamp": "t"},
        {"role": "assistant", "content": "done", "timestamp": "t"},
    ]
    window = legal_messages(messages)
    assert window[0] == {"role": "user", "content": "q"}
    assert [c["id"] for c in window[1]["tool_calls"]] == ["ok"]
    assert window[2] == {"role": "tool", "tool_call_id": "ok", "name": "f", "content": "r"}
    assert all("timestamp" not in m for m in window)


async def test_history_window_trims_oldest_first(tmp_path: Path) -> None:
    """Only the newest messages that fit the budget are kept, from a user message on."""
    store = SessionStore(tmp_path, UTC)
    session = await store.get("t:4")
    turns = []
    for index in range(10):
        turns += [{"role": "user", "content": f"u{index}"}, {"role": "assistant", "content": "a"}]
    await store.add_messages(session, turns)
    window = history_window(session, CharCounter(), available=16)
    assert [m["content"] for m in window] == ["u7", "a", "u8", "a", "u9", "a"]
    capped = history_window(session, CharCounter(), available=10_000, max_messages=4)
    assert [m["content"] for m in capped] == ["u8", "a", "u9", "a"]


async def test_history_window_keeps_a_turn_that_fits_exactly(tmp_path: Path) -> None:
    """Messages whose tokens add up to exactly `available` all go in; one token less drops the
    oldest turn."""
    store = SessionStore(tmp_path, UTC)
    session = await store.get("t:edge")
    await store.add_messages(
        session,
        [
            {"role": "user", "content": "q0"},
            {"role": "assistant", "content": "a0"},
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"},
        ],
    )
    exact = sum(CharCounter().count_message(m) for m in session.messages)
    window = history_window(session, CharCounter(), available=exact)
    assert [m["content"] for m in window] == ["q0", "a0", "q1", "a1"]
    short = history_window(session, CharCounter(), available=exact - 1)
    assert [m["content"] for m in short] == ["q1", "a1"]


MALFORMED = [
    '{"role":"assistant","content":"","tool_calls":[1]}',
    '{"role":"assistant","content":"","tool_calls":"abc"}',
    '{"role":"user","content":{"text":"an object, not text"}}',
]


@pytest.mark.parametrize("line", MALFORMED)
async def test_a_malformed_record_costs_only_itself(
    line: str,
    tmp_path: Path,
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A valid-JSON message of the wrong shape is skipped with a warning; the chat goes on."""
    sessions = tmp_path / "workspace" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / file_name("test:42")).write_text(
        '{"role":"user","content":"before","timestamp":"2026-01-01T10:00:00+00:00"}\n'
        f"{line}\n"
        '{"role":"assistant","content":"after","timestamp":"2026-01-01T10:00:01+00:00"}\n'
    )
    with caplog.at_level(logging.WARNING, logger="memory.sessions.file"):
        async with make_runtime() as runtime:
            reply = await runtime.agent.handle(inbound("still there?"))
            assert reply is not None and reply.text == "echo: still there?"
            status = await runtime.agent.handle(inbound("/status"))
            assert status is not None and "Messages: 4" in status.text
    assert any("skipping malformed message" in r.getMessage() for r in caplog.records)
    sent = fake_llm.chat_requests()[-1]["messages"]
    assert [m.get("content") for m in sent[1:3]] == ["before", "after"]


async def test_new_on_a_session_not_yet_written_keeps_one_object_and_one_metadata_line(
    tmp_path: Path,
) -> None:
    """`/new` on a chat whose file does not exist yet archives nothing and forgets nothing: a
    writer already holding the session and the next `get` append through the same object, so the
    file gets one metadata line (two objects would each write one, and after the next `/new`
    the stale one would start a file without any)."""
    store = SessionStore(tmp_path / "sessions", UTC)
    held = await store.get("telegram:1")  # a turn under way holds it; nothing stored yet
    assert await store.rotate("telegram:1") is None
    again = await store.get("telegram:1")
    assert again is held
    await store.add_messages(held, [{"role": "user", "content": "one"}])
    await store.add_messages(again, [{"role": "user", "content": "two"}])
    assert await store.rotate("telegram:1") is not None
    after = await store.get("telegram:1")
    await store.add_messages(after, [{"role": "user", "content": "three"}])
    for path in [*(tmp_path / "sessions").glob("*.jsonl"), *store.archived_paths()]:
        lines = path.read_bytes().splitlines()
        kinds = [json.loads(line).get("_type") for line in lines]
        assert kinds[0] == "metadata" and kinds.count("metadata") == 1, path.name


DEEP = 100_000  # levels of nesting: far past the interpreter's recursion limit


async def test_a_deeply_nested_line_costs_only_itself(
    tmp_path: Path,
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A line nested 100k deep is skipped with one warning: the chat, /status and search go on."""
    sessions = tmp_path / "workspace" / "sessions"
    sessions.mkdir(parents=True)
    deep = '{"role":"user","content":' + "[" * DEEP + "]" * DEEP + "}"
    (sessions / file_name("test:42")).write_text(
        '{"role":"user","content":"before the knot","timestamp":"2026-01-01T10:00:00+00:00"}\n'
        f"{deep}\n"
        '{"role":"assistant","content":"after the knot","timestamp":"2026-01-01T10:00:01+00:00"}\n'
    )
    with caplog.at_level(logging.WARNING):
        async with make_runtime() as runtime:
            reply = await runtime.agent.handle(inbound("still there?"))
            assert reply is not None and reply.text == "echo: still there?"
            status = await runtime.agent.handle(inbound("/status"))
            assert status is not None and "Messages: 4" in status.text
    skipped = [r for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 1 and "line=2" in skipped[0].getMessage()
    sent = fake_llm.chat_requests()[-1]["messages"]
    assert [m.get("content") for m in sent[1:3]] == ["before the knot", "after the knot"]
    search = MemorySearch(tmp_path / "workspace", UTC)
    try:
        [hit] = await search.search("knot after")
        assert hit.path == "sessions/test:42.jsonl"
        shown = await search.get("sessions/test:42.jsonl", 2, 1)
        assert shown.splitlines()[1].startswith('2: {"role":"user","content":[[[')
    finally:
        await search.aclose()


def test_a_deeply_nested_failure_report_reads_as_none(tmp_path: Path) -> None:
    """A consolidation failure report nested 100k deep reads as no failures, not an error."""
    path = tmp_path / "consolidation-failures.json"
    path.write_text("[" * DEEP + "]" * DEEP)
    assert read_failure_report(path) == {}
