"""Archives at start: what /new put away is looked at beside the first replies, and cheaply."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from gateway.cli.status import describe
from tests.conftest import RuntimeFactory, inbound, turns
from tests.fakes.llm import FakeLLM


def _release(fifo: Path) -> None:
    """Let a reader waiting on `fifo` go: a writer comes and leaves at once (it then reads EOF)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader waits (ENXIO): nothing to release
        pass


async def test_a_finished_archive_is_not_read_whole_again_at_start(
    make_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Once an archive is consolidated to its end, a start reads only its end, never its middle."""
    async with make_runtime() as runtime:
        await turns(runtime, 3)
        await runtime.agent.handle(inbound("/new"))
        await runtime.consolidator.wait_idle()
        [path] = runtime.sessions.archived_paths()
    async with make_runtime() as runtime:  # the first look after archival
        await runtime.consolidator.wait_idle()
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) > 6
    lines[2] = b"x" * (len(lines[2]) - 1) + b"\n"  # a consolidated message, spoiled in place
    path.write_bytes(b"".join(lines))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memory.sessions.file"):
        async with make_runtime() as runtime:
            await runtime.consolidator.wait_idle()
    assert [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()] == []


async def test_a_reply_does_not_wait_for_the_archive_to_be_looked_at(
    make_runtime: RuntimeFactory, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """An archive that cannot be read yet (a FIFO stands for a slow disk) delays no reply."""
    archive = tmp_path / "workspace" / "sessions" / "archive"
    archive.mkdir(parents=True)
    fifo = archive / "test:9.20260101T000000.jsonl"
    os.mkfifo(fifo)
    try:
        async with asyncio.timeout(10), make_runtime() as runtime:
            reply = await runtime.agent.handle(inbound("hello while the archive waits"))
            assert reply is not None and reply.text
    finally:
        _release(fifo)
    assert len(fake_llm.chat_requests()) == 1


async def test_status_reads_a_finished_archive_from_its_end(
    make_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """`memgate status` counts archives awaiting consolidation without reading finished ones whole."""
    async with make_runtime() as runtime:
        await turns(runtime, 3)
        await runtime.agent.handle(inbound("/new"))
        await runtime.consolidator.wait_idle()
        [path] = runtime.sessions.archived_paths()
        config = runtime.config
    assert "0 archived session(s) awaiting" in describe(config)  # the first look
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = b"x" * (len(lines[2]) - 1) + b"\n"
    path.write_bytes(b"".join(lines))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memory.sessions.file"):
        assert "0 archived session(s) awaiting" in describe(config)
    assert [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()] == []
