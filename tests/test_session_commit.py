"""Group commit of session appends: one thread hop for the appends of one loop iteration."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from pathlib import Path

import pytest

from memory.sessions.file import file_name, parse_session_bytes
from memory.sessions.store import SessionStore
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM


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


class HeldDisk:
    """os.fsync that blocks (in its worker thread) until released, noting the files it synced."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.synced: list[int] = []
        self._real = os.fsync

    def fsync(self, fd: int) -> None:
        self.entered.set()
        if not self.release.wait(timeout=30):
            raise TimeoutError("the test never released the disk")
        self._real(fd)
        self.synced.append(os.fstat(fd).st_ino)


async def test_an_unsynced_append_returns_once_written_and_a_synced_one_waits_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the disk's sync held: `synced=False` returns with its line in the file and in the
    session; a synced append of another session does not return until the sync is done."""
    disk = HeldDisk()
    monkeypatch.setattr("memory.sessions.commit.os.fsync", disk.fsync)
    store = SessionStore(tmp_path, UTC)
    quick, careful = await store.get("t:quick"), await store.get("t:careful")
    synced = asyncio.ensure_future(store.add_messages(careful, [{"role": "user", "content": "b"}]))
    await store.add_messages(quick, [{"role": "user", "content": "a"}], synced=False)
    data = (tmp_path / file_name("t:quick")).read_bytes()
    assert [m["content"] for m in parse_session_bytes(data).messages] == ["a"]
    assert [m["content"] for m in quick.messages] == ["a"]
    await asyncio.to_thread(disk.entered.wait, 30)
    assert not synced.done() and disk.synced == []
    disk.release.set()
    await synced
    inodes = {(tmp_path / file_name(key)).stat().st_ino for key in ("t:quick", "t:careful")}
    assert set(disk.synced) == inodes  # the unsynced line reached the disk with its batch


async def test_an_unsynced_append_waits_for_no_worker_thread(tmp_path: Path) -> None:
    """With every worker of the loop's thread pool busy, an unsynced append still returns with its
    line in the file (it is written on the loop), as does a group chat's at the same moment; the
    fsync follows once a worker is free."""
    store = SessionStore(tmp_path, UTC)
    session, group = await store.get("t:1"), await store.get("t:group")
    group.group = True
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    free = threading.Event()
    busy = loop.run_in_executor(None, free.wait, 30)
    try:
        await asyncio.wait_for(
            asyncio.gather(
                store.add_messages(session, [{"role": "user", "content": "q"}], synced=False),
                store.add_messages(group, [{"role": "user", "content": "g"}], synced=False),
            ),
            10,
        )
        path = tmp_path / file_name("t:1")
        assert [m["content"] for m in parse_session_bytes(path.read_bytes()).messages] == ["q"]
        assert [m["content"] for m in session.messages] == ["q"]
        in_group = parse_session_bytes((tmp_path / file_name("t:group")).read_bytes())
        assert [m["content"] for m in in_group.messages] == ["g"] and in_group.group
    finally:
        free.set()
        await busy
    await store.add_messages(session, [{"role": "assistant", "content": "a"}])  # through the pool
    reloaded = await SessionStore(tmp_path, UTC).get("t:1")
    assert [m["content"] for m in reloaded.messages] == ["q", "a"]


async def test_the_next_synced_append_waits_until_an_unsynced_line_is_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user line written unsynced, then the answer: the answer's append returns only after an
    fsync of the file that holds both lines."""
    disk = HeldDisk()
    monkeypatch.setattr("memory.sessions.commit.os.fsync", disk.fsync)
    store = SessionStore(tmp_path, UTC)
    session = await store.get("t:1")
    await store.add_messages(session, [{"role": "user", "content": "q"}], synced=False)
    answer = asyncio.ensure_future(
        store.add_messages(session, [{"role": "assistant", "content": "a"}])
    )
    await asyncio.to_thread(disk.entered.wait, 30)
    assert not answer.done()
    disk.release.set()
    await answer
    path = tmp_path / file_name("t:1")
    assert disk.synced.count(path.stat().st_ino) >= 1
    assert [m["content"] for m in parse_session_bytes(path.read_bytes()).messages] == ["q", "a"]


async def test_the_model_is_asked_while_the_users_line_is_still_being_synced(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the disk's sync held, a turn's model call is made (its user line already in the file),
    and the answer comes back only once the disk has synced."""
    async with make_runtime() as runtime:
        disk = HeldDisk()
        monkeypatch.setattr("memory.sessions.commit.os.fsync", disk.fsync)
        turn = asyncio.ensure_future(runtime.agent.handle(inbound("hello")))
        await fake_llm.wait_for_requests(1, kind="chat")
        path = runtime.sessions.path_for("test:42")
        assert [m["content"] for m in parse_session_bytes(path.read_bytes()).messages] == ["hello"]
        assert not turn.done()
        disk.release.set()
        reply = await turn
        assert reply is not None and reply.text == "echo: hello"
        assert path.stat().st_ino in disk.synced
