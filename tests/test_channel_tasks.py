"""A channel's per-message tasks: supervised in one group, drained within a grace at the stop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from channels.tasks import MessageTasks


async def test_a_failing_task_is_logged_once_and_the_rest_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One task raising is one error line with its traceback; the group and its other tasks live."""
    tasks = MessageTasks("chat")
    finished = asyncio.Event()

    async def bug() -> None:
        raise RuntimeError("a bug in one message's work")

    async with tasks.running(grace=1.0):
        tasks.spawn(bug)
        tasks.spawn(finished.wait)
        finished.set()
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.getMessage().startswith("chat task failed work=")
    assert record.exc_info is not None and str(record.exc_info[1]) == "a bug in one message's work"


async def test_the_stop_gives_work_started_during_it_the_grace() -> None:
    """Cancelled, the block waits for running work and for the work it starts meanwhile (a turn
    after its download), within the grace; what outlasts the grace is cancelled."""
    tasks = MessageTasks("chat")
    download, answered, cut = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def turn() -> None:
        await asyncio.sleep(0)
        answered.set()

    async def intake() -> None:
        await download.wait()
        tasks.spawn(turn)

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cut.set()

    async def serve() -> None:
        async with tasks.running(grace=0.5):
            tasks.spawn(intake)
            tasks.spawn(stuck)
            await asyncio.Event().wait()

    serving = asyncio.create_task(serve())
    await asyncio.sleep(0)
    serving.cancel()
    await asyncio.sleep(0)  # the stop has begun: the block is waiting for its tasks
    download.set()
    with pytest.raises(asyncio.CancelledError):
        await serving
    assert answered.is_set() and cut.is_set()
    assert not tasks.open


async def test_an_error_of_the_block_leaves_as_itself() -> None:
    """What the block raises (a refused token at start) is not wrapped in an ExceptionGroup."""
    tasks = MessageTasks("chat")
    with pytest.raises(ValueError, match="refused"):
        async with tasks.running(grace=0.0):
            tasks.spawn(asyncio.sleep, 0)
            raise ValueError("refused")


async def test_spawning_outside_the_block_is_a_bug() -> None:
    """No group, no task: spawning before the start or after the stop raises."""
    tasks = MessageTasks("chat")
    with pytest.raises(RuntimeError, match="not running"):
        tasks.spawn(asyncio.sleep, 0)
