"""The refresh before a search, told what this process writes: those files and memory/ at once,
every other file at the next full scan (FULL_SCAN_EVERY), the first refresh a full one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date
from pathlib import Path

import pytest

from memory.files import MemoryFiles
from memory.search.searcher import MemorySearch
from memory.search.touched import FULL_SCAN_EVERY, TouchedFiles
from memory.sessions.store import SessionStore
from tests.conftest import RuntimeFactory, inbound
from tests.corpus import stamp, write_corpus
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Process:
    """What one process holds: its session store telling its search what it wrote."""

    workspace: Path
    clock: Clock
    store: SessionStore
    search: MemorySearch


@pytest.fixture
async def process(tmp_path: Path) -> AsyncIterator[Process]:
    """The corpus, and a store and search wired as the runtime wires them, on a test clock."""
    workspace = tmp_path / "workspace"
    await write_corpus(workspace)
    clock = Clock()
    touched = TouchedFiles(clock=clock)
    store = SessionStore(workspace / "sessions", UTC, on_write=touched.add)
    search = MemorySearch(workspace, UTC, touched=touched)
    try:
        yield Process(workspace, clock, store, search)
    finally:
        await search.aclose()


def append_line(path: Path, content: str) -> None:
    """A user message appended by someone else: another process, or a person's editor."""
    record = {"role": "user", "content": content, "timestamp": stamp(20)}
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


def remove_index(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


async def paths(search: MemorySearch, query: str) -> list[str]:
    return [hit.path for hit in await search.search(query)]


async def test_written_file_is_read_at_once_others_at_the_next_full_scan(
    process: Process,
) -> None:
    """A message the store appends is found by the next search; a session changed behind the
    index's back is not read until FULL_SCAN_EVERY has passed, then it is."""
    assert await paths(process.search, "bluefalcon42") == ["sessions/discord:77.jsonl"]
    append_line(process.workspace / "sessions" / "discord:77.jsonl", "the zeppelin museum")
    session = await process.store.get("telegram:42")
    await process.store.add_messages(session, [{"role": "user", "content": "kayak rental"}])
    assert await paths(process.search, "kayak") == ["sessions/telegram:42.jsonl"]
    assert await paths(process.search, "zeppelin") == []
    process.clock.now += FULL_SCAN_EVERY - 0.1
    assert await paths(process.search, "zeppelin") == []
    process.clock.now += 0.1
    assert await paths(process.search, "zeppelin") == ["sessions/discord:77.jsonl"]


async def test_rotated_session_is_found_in_the_archive_at_once(process: Process) -> None:
    """/new moves a file: the search right after finds its messages under sessions/archive/ and
    no longer under the live path."""
    assert await paths(process.search, "bluefalcon42") == ["sessions/discord:77.jsonl"]
    archived = await process.store.rotate("discord:77")
    assert archived is not None
    expected = archived.relative_to(process.workspace).as_posix()
    assert await paths(process.search, "bluefalcon42") == [expected]


async def test_other_process_writes_are_seen_after_the_full_scan_interval(
    process: Process,
) -> None:
    """Another process's new session, its append and a session deleted by hand are all seen
    once FULL_SCAN_EVERY has passed, not before."""
    assert await paths(process.search, "bluefalcon42") == ["sessions/discord:77.jsonl"]
    other = SessionStore(process.workspace / "sessions", UTC)  # `memgate chat` beside the service
    session = await other.get("terminal:1")
    await other.add_messages(session, [{"role": "user", "content": "the quokka photos"}])
    append_line(process.workspace / "sessions" / "telegram:42.jsonl", "ask about the okapi")
    (process.workspace / "sessions" / "discord:77.jsonl").unlink()
    for query in ("quokka", "okapi"):
        assert await paths(process.search, query) == []
    assert await paths(process.search, "bluefalcon42") == ["sessions/discord:77.jsonl"]
    process.clock.now += FULL_SCAN_EVERY
    assert await paths(process.search, "quokka") == ["sessions/terminal:1.jsonl"]
    assert await paths(process.search, "okapi") == ["sessions/telegram:42.jsonl"]
    assert await paths(process.search, "bluefalcon42") == []


async def test_memory_files_are_looked_at_before_every_search(process: Process) -> None:
    """HISTORY.md, MEMORY.md and notes, written by anyone, are seen by the next search."""
    assert await paths(process.search, "plumber") == ["memory/2026-01-15.md"]
    files = MemoryFiles(process.workspace, UTC)
    files.append_history("[2026-01-21 09:00] Alice adopted a greyhound named Comet.")
    (process.workspace / "memory" / "2026-01-15.md").unlink()
    files.daily_note_path(date(2026, 1, 16)).write_text("Buy a leash.\n", encoding="utf-8")
    assert await paths(process.search, "greyhound") == ["memory/HISTORY.md"]
    assert await paths(process.search, "plumber") == []
    assert await paths(process.search, "leash") == ["memory/2026-01-16.md"]


async def test_a_new_index_file_is_filled_by_a_full_scan(process: Process) -> None:
    """An index deleted under a running process is filled from every file by the next search,
    not from the files written since."""
    assert await paths(process.search, "bluefalcon42") == ["sessions/discord:77.jsonl"]
    remove_index(process.search.index.db.path)
    assert await paths(process.search, "bluefalcon42") == ["sessions/discord:77.jsonl"]


class Stop(Exception):
    """What a stopping service's progress callback raises between two files."""


def stop(done: int, total: int) -> None:
    raise Stop


async def test_a_refresh_cut_short_leaves_its_work_to_the_next(process: Process) -> None:
    """A refresh stopped after its first file (as a stopping service stops it) does not count:
    the files it had taken, written or due for the full scan, are read by the next search."""
    assert await paths(process.search, "bluefalcon42") == ["sessions/discord:77.jsonl"]
    for key, word in (("telegram:42", "gecko"), ("discord:77", "iguana")):
        session = await process.store.get(key)
        await process.store.add_messages(session, [{"role": "user", "content": word}])
    with pytest.raises(Stop):
        await asyncio.to_thread(process.search.index.refresh, stop, full=False)
    assert await paths(process.search, "gecko") == ["sessions/telegram:42.jsonl"]
    assert await paths(process.search, "iguana") == ["sessions/discord:77.jsonl"]
    for name, word in (("telegram:42", "axolotl"), ("discord:77", "narwhal")):
        append_line(process.workspace / "sessions" / f"{name}.jsonl", word)
    process.clock.now += FULL_SCAN_EVERY
    with pytest.raises(Stop):
        await asyncio.to_thread(process.search.index.refresh, stop)
    assert await paths(process.search, "axolotl") == ["sessions/telegram:42.jsonl"]
    assert await paths(process.search, "narwhal") == ["sessions/discord:77.jsonl"]


async def test_a_turns_own_message_is_found_by_its_search(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """In the runtime, the model's memory_search finds the message of the turn that called it,
    while a session changed behind the index's back since the first search is not read again
    (the test's 60 s timeout is within FULL_SCAN_EVERY: this test cannot outlast it)."""
    async with make_runtime() as runtime:
        workspace = runtime.config.workspace
        await write_corpus(workspace)
        fake_llm.push(tool_call("memory_search", {"query": "bluefalcon42"}, call_id="s1"))
        fake_llm.push(text("On the fridge."))
        await runtime.agent.handle(inbound("where is the cabin wifi password?"))
        append_line(workspace / "sessions" / "discord:77.jsonl", "the marmalade recipe")
        fake_llm.push(tool_call("memory_search", {"query": "marmalade"}, call_id="s2"))
        fake_llm.push(text("Your shed code is marmalade."))
        await runtime.agent.handle(inbound("the shed code is marmalade"))
    requests = fake_llm.chat_requests()
    found = [tool_results(requests[i])[-1] for i in (1, 3)]
    hits = [
        [line.split()[0].rpartition(":")[0] for line in result.splitlines() if "«" in line]
        for result in found
    ]
    assert hits == [["sessions/discord:77.jsonl"], ["sessions/test:42.jsonl"]]
