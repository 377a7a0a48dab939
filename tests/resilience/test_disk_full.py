"""A full disk: the workspace on a small tmpfs filled up until writes raise ENOSPC.

Mounting a tmpfs needs root (or CAP_SYS_ADMIN); elsewhere these tests skip and say so. A tmpfs
counts whole pages, so a write that fits in a file's last page still succeeds on a "full" disk:
the messages that must fail are made larger than a page.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.service.app import open_runtime
from memory.files import MEMORY_TEMPLATE
from memory.sessions.file import parse_session_bytes
from tests.conftest import ManualClock, build_config, inbound
from tests.fakes.llm import FakeLLM, is_consolidation, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import read_session, session_paths, until

pytestmark = pytest.mark.timeout(120)

BIGGER_THAN_A_PAGE = 3 * 4096


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs mounted under tmp_path, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command: cannot make a small filesystem to fill")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


class Filler:
    """A file that takes every free byte of its filesystem until `free()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (1 << 16, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)

    def free(self) -> None:
        self.path.unlink()


async def test_a_full_disk_fails_the_turn_clearly_and_damages_nothing(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram, small_disk: Path
) -> None:
    """On a full disk the user is told, ENOSPC is logged, nothing stored is harmed."""
    gateway = make_gateway({"workspace": str(small_disk / "workspace")})
    await gateway.start()
    fake_telegram.message("before the disk fills")
    await fake_telegram.wait_sent(1, within=30)
    before = {p: p.read_bytes() for p in session_paths(gateway.workspace)}
    memory_md = (gateway.workspace / "memory" / "MEMORY.md").read_bytes()
    asked = len(fake_llm.chat_requests())

    filler = Filler(small_disk / "filler")
    fake_telegram.message("a long message " + "x" * BIGGER_THAN_A_PAGE)
    [_, failed] = await fake_telegram.wait_sent(2, within=30)
    assert failed["plain"].startswith("Sorry, something went wrong")
    await until(lambda: "No space left on device" in gateway.log(), 10, "ENOSPC in the log")
    assert len(fake_llm.chat_requests()) == asked  # the model is not asked what cannot be kept
    assert gateway.alive and await gateway.health() is not None
    for path, data in before.items():
        assert path.read_bytes().startswith(data)
        read_session(path)  # complete lines all parse; a cut-short tail is allowed
    assert (gateway.workspace / "memory" / "MEMORY.md").read_bytes() == memory_md

    filler.free()
    fake_telegram.message("after space is freed")
    await until(
        lambda: any(p.get("plain") == "echo: after space is freed" for p in fake_telegram.sent()),
        30,
        "an answer after space is freed",
    )
    assert await gateway.stop() == 0
    await gateway.start()
    fake_telegram.message("after a restart")
    await until(
        lambda: any(p.get("plain") == "echo: after a restart" for p in fake_telegram.sent()),
        30,
        "an answer after the restart",
    )
    # Read as memgate does (the line after the failed append is test_the_message_after_...).
    [path] = session_paths(gateway.workspace)
    contents = [m["content"] for m in parse_session_bytes(path.read_bytes()).messages]
    assert contents[:2] == ["before the disk fills", "echo: before the disk fills"]
    assert contents[-2:] == ["after a restart", "echo: after a restart"]


async def test_consolidation_on_a_full_disk_moves_nothing_and_resumes(
    fake_llm: FakeLLM, small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A consolidation hitting ENOSPC changes nothing, is logged, backs off and later succeeds."""
    release = asyncio.Event()
    saved = {
        "history_entry": "[2026-01-01 00:00] The user sent two long lines of y.",
        "memory_update": MEMORY_TEMPLATE + "\n- Sends long lines of y\n",
    }
    fake_llm.push(tool_call("save_memory", saved), hold=release, match=is_consolidation)
    config = build_config(small_disk / "workspace", fake_llm.url, {"memory": {"window": 4}})
    caplog.set_level(logging.INFO)
    async with open_runtime(config) as runtime:
        for number in range(2):
            await runtime.agent.handle(inbound(f"turn {number} " + "y" * BIGGER_THAN_A_PAGE))
        await fake_llm.wait_for_requests(1, kind="consolidation", within=20)
        clock = ManualClock()  # the backoff's waits pass at once, and are recorded
        runtime.consolidator.clock, runtime.consolidator.sleep = clock, clock.sleep
        filler = Filler(small_disk / "filler")
        release.set()
        await runtime.consolidator.wait_idle()
        session = await runtime.sessions.get("test:42")
        assert session.last_consolidated == 0
        assert runtime.memory.read_memory() == MEMORY_TEMPLATE
        assert "consolidation failed session=test:42" in caplog.text
        assert "No space left on device" in caplog.text
        assert runtime.consolidator.backing_off("test:42") and clock.waits

        filler.free()
        clock.now += runtime.consolidator.settings.max_retry_delay * 2
        await runtime.agent.handle(inbound("turn 2"))
        await runtime.consolidator.wait_idle()
        assert session.last_consolidated > 0
        assert "Summary of" in runtime.memory.read_history()
        assert runtime.memory.list_versions()  # the template was kept when MEMORY.md changed
    loaded = parse_session_bytes(runtime.sessions.path_for("test:42").read_bytes())
    assert [m["content"][:6] for m in loaded.messages if m["role"] == "user"] == [
        "turn 0",
        "turn 1",
        "turn 2",
    ]


async def test_the_message_after_a_failed_append_is_kept(
    fake_llm: FakeLLM, small_disk: Path
) -> None:
    """After an append fails half-way on a full disk, the next message is stored whole."""
    config = build_config(small_disk / "workspace", fake_llm.url)
    async with open_runtime(config) as runtime:
        await runtime.agent.handle(inbound("first"))
        filler = Filler(small_disk / "filler")
        reply = await runtime.agent.handle(inbound("z" * BIGGER_THAN_A_PAGE))
        assert reply is not None and reply.text.startswith("Sorry")
        filler.free()
        reply = await runtime.agent.handle(inbound("after the disk was freed"))
        assert reply is not None and reply.text == "echo: after the disk was freed"
        data = runtime.sessions.path_for("test:42").read_bytes()
    users = [m["content"] for m in parse_session_bytes(data).messages if m["role"] == "user"]
    assert users == ["first", "after the disk was freed"]


async def test_memgate_run_on_a_full_disk_exits_1_with_the_reason(
    make_gateway: GatewayFactory, small_disk: Path
) -> None:
    """Starting on a full disk fails fast with status 1 and a one-line reason naming ENOSPC."""
    filler = Filler(small_disk / "filler")
    gateway = make_gateway({"workspace": str(small_disk / "workspace")})
    await gateway.start(ready=False)
    assert gateway.process is not None
    assert await asyncio.wait_for(gateway.process.wait(), 60) == 1
    assert "memgate: OSError: [Errno 28] No space left on device" in gateway.log()
    filler.free()
    await gateway.start()
    assert await gateway.stop() == 0


async def test_memory_md_is_never_left_empty_by_a_full_disk(
    fake_llm: FakeLLM, small_disk: Path
) -> None:
    """A start that fails on a full disk leaves no empty MEMORY.md behind."""
    config = build_config(small_disk / "workspace", fake_llm.url)
    filler = Filler(small_disk / "filler")
    with pytest.raises(OSError, match="No space left"):
        async with open_runtime(config):
            pass
    filler.free()
    async with open_runtime(config) as runtime:
        memory = runtime.memory.read_memory()
    assert memory == MEMORY_TEMPLATE
