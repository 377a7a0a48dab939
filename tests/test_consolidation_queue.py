"""The consolidation queue (memory/consolidation/work_queue.py) with plain jobs: dedupe, again, retry, errors."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from memory.consolidation.work_queue import WorkQueue


@dataclass(frozen=True)
class Item:
    ident: str


async def serve(queue: WorkQueue[Item], done: asyncio.Event, workers: int = 1) -> None:
    """Run `queue` until `done` is set, then stop its workers."""
    async with asyncio.timeout(10), asyncio.TaskGroup() as group:
        task = group.create_task(queue.run(workers))
        await done.wait()
        await queue.wait_idle()
        task.cancel()


async def test_a_job_is_queued_once_while_queued_or_running() -> None:
    """A second put of the same ident is refused until the first has run; then it is taken."""
    seen: list[str] = []

    async def process(item: Item) -> bool:
        seen.append(item.ident)
        return False

    queue: WorkQueue[Item] = WorkQueue("test", process, lambda item: None)
    assert queue.put(Item("a")) and not queue.put(Item("a")) and queue.put(Item("b"))
    assert queue.depth == 2
    done = asyncio.Event()
    done.set()
    await serve(queue, done)
    assert seen == ["a", "b"] and queue.depth == 0
    assert queue.put(Item("a"))


async def test_again_and_a_retry_delay_queue_the_job_once_more() -> None:
    """True from process queues the job again at once; a retry_in delay queues it when due."""
    calls: list[str] = []
    done = asyncio.Event()

    async def process(item: Item) -> bool:
        calls.append(item.ident)
        if calls.count(item.ident) == 3:
            done.set()
        return calls.count(item.ident) == 1  # the first run asks for one more

    def retry_in(item: Item) -> float | None:
        return 0.0 if calls.count(item.ident) == 2 else None

    queue: WorkQueue[Item] = WorkQueue("test", process, retry_in)
    queue.put(Item("x"))
    await serve(queue, done)
    assert calls == ["x", "x", "x"]


async def test_a_failing_job_is_logged_in_one_line_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception in one job is one ERROR line naming it (the traceback at DEBUG); the next job
    still runs on the same worker."""
    done = asyncio.Event()

    async def process(item: Item) -> bool:
        if item.ident == "bad":
            raise ValueError("broken job")
        done.set()
        return False

    queue: WorkQueue[Item] = WorkQueue("test", process, lambda item: None)
    queue.put(Item("bad"))
    queue.put(Item("good"))
    with caplog.at_level(logging.DEBUG, logger="memory.consolidation.work_queue"):
        await serve(queue, done)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "test job failed job=bad error=ValueError: broken job"
    ]
    assert errors[0].exc_info is None
    assert any(r.levelno == logging.DEBUG and r.exc_info for r in caplog.records)
