"""A deduplicating job queue served by a fixed number of workers, with delayed retries.

Consolidation's queue (memory/consolidation/consolidator.py) without its policy: a job is queued at most once
while queued or running (by its `ident`), a job may ask to run again at once or after a delay,
and `drain()` lets running jobs finish while starting no new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)


class Queued(Protocol):
    @property
    def ident(self) -> str: ...


J = TypeVar("J", bound=Queued)


class WorkQueue(Generic[J]):
    """Runs `process(job)` for each queued job; True from it queues the job again at once.

    After a job, `retry_in(job)` may return seconds after which it is queued again (None: not).
    """

    def __init__(
        self,
        name: str,
        process: Callable[[J], Awaitable[bool]],
        retry_in: Callable[[J], float | None],
    ) -> None:
        self.name = name
        self._process = process
        self._retry_in = retry_in
        self._queue: asyncio.Queue[J] = asyncio.Queue()
        self._pending: set[str] = set()
        self._retries: dict[str, asyncio.TimerHandle] = {}  # jobs waiting out a delay, by ident
        self._running = False
        self._closing = False
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._changed = asyncio.Condition()
        self.queued = 0  # jobs taken since start

    def put(self, job: J) -> bool:
        """Queue `job` unless a job with its ident is already queued or running."""
        if job.ident in self._pending:
            return False
        self._pending.add(job.ident)
        self.queued += 1
        self._idle.clear()
        self._queue.put_nowait(job)
        return True

    @property
    def depth(self) -> int:
        """Jobs queued or running."""
        return len(self._pending)

    async def run(self, workers: int) -> None:
        """Serve the queue with `workers` workers until cancelled."""
        if self._running:
            raise RuntimeError(f"{self.name} is already running")
        self._running = True
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(workers):
                    group.create_task(self._work(), name=f"{self.name}-{index}")
        finally:
            self._running = False

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            if self._closing:
                continue  # left for the next start, which derives it from the files again
            self._active += 1
            again = False
            try:
                again = await self._process(job)
            except Exception as exc:  # a bug in one job must not stop its worker
                log.error(
                    "%s job failed job=%s error=%s: %s",
                    self.name,
                    job.ident,
                    type(exc).__name__,
                    exc,
                )
                log.debug("%s job failed job=%s", self.name, job.ident, exc_info=True)
                log.debug("%s job failed job=%s", self.name, job.ident, exc_info=True)
            finally:
                self._active -= 1
                self._pending.discard(job.ident)
                delay = None if again else self._retry_in(job)
                if again:
                    self.put(job)
                elif delay is not None:
                    self._retry_later(job, delay)
                if not self._pending:
                    self._idle.set()
                async with self._changed:
                    self._changed.notify_all()

    def _retry_later(self, job: J, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._retries[job.ident] = loop.call_later(max(0.0, delay), self._retry_due, job)

    def _retry_due(self, job: J) -> None:
        self._retries.pop(job.ident, None)
        if not self._closing:
            self.put(job)

    async def wait_idle(self) -> None:
        """Wait until nothing is queued or running."""
        await self._idle.wait()

    async def drain(self, grace: float) -> bool:
        """Start no new job and give running ones `grace` seconds; True if they all finished."""
        self._closing = True
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        try:
            async with asyncio.timeout(grace), self._changed:
                await self._changed.wait_for(lambda: self._active == 0)
        except TimeoutError:
            log.warning(
                "%s still running after %.0fs; it resumes on the next start", self.name, grace
            )
            return False
        return True
