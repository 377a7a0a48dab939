"""A channel's per-message tasks: one `asyncio.TaskGroup`, each task supervised, and a stop that
lets the work under way finish within a grace period.

A message's turn meets the agent's own error boundary (`handle()` answers every failure), so what
fails here is the channel's own work around it; it is logged once, here, and never ends the
channel. Imports nothing of ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVarTuple

log = logging.getLogger(__name__)

Args = TypeVarTuple("Args")


class MessageTasks:
    """The tasks a channel starts for its messages (turns, replies, typing), in one group."""

    def __init__(self, channel: str) -> None:
        self._channel = channel
        self._group: asyncio.TaskGroup | None = None
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def open(self) -> bool:
        """True while the group takes new tasks (from `running()`'s start to its drain's end)."""
        return self._group is not None

    @contextlib.asynccontextmanager
    async def running(self, grace: float) -> AsyncIterator[None]:
        """Hold the group while the block runs. When it ends (cancelled at a stop, or failed),
        the tasks get `grace` seconds to finish, those they start included; then what is left
        is cancelled. An error of the block leaves as itself, not wrapped in a group."""
        if self._group is not None:
            raise RuntimeError(f"{self._channel} tasks are already running")
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                try:
                    yield
                finally:
                    try:
                        await self._drain(grace)
                    finally:
                        self._group = None
        except BaseExceptionGroup as errors:
            # The tasks are supervised and never fail, so the group holds only the block's own
            # error: raised as itself, a caller's `except` (a refused token…) still matches it.
            if len(errors.exceptions) != 1:
                raise
            error = errors.exceptions[0]
            raise error from error.__cause__

    def spawn(self, work: Callable[[*Args], Awaitable[object]], *args: *Args) -> asyncio.Task[None]:
        """Run `work(*args)` in the group. Its coroutine is made inside the task, so a task
        cancelled before it starts leaves none that was never awaited."""
        if self._group is None:
            raise RuntimeError(f"{self._channel} tasks are not running")
        task = self._group.create_task(self._supervised(work, *args))
        self._running += 1
        self._idle.clear()
        task.add_done_callback(self._forget)
        return task

    async def _supervised(self, work: Callable[[*Args], Awaitable[object]], *args: *Args) -> None:
        try:
            await work(*args)
        except Exception:  # the supervisor: a task failing would cancel the group, and with it
            # every chat's turns and the connection; one message's failure is logged once, here
            log.exception("%s task failed work=%s", self._channel, _name(work))

    def _forget(self, _: asyncio.Task[None]) -> None:
        self._running -= 1
        if not self._running:
            self._idle.set()

    async def _drain(self, grace: float) -> None:
        if not self._running:
            return
        log.info(
            "%s waiting for running turns count=%d grace=%.1fs",
            self._channel,
            self._running,
            grace,
        )
        try:
            async with asyncio.timeout(grace):
                await self._idle.wait()
        except TimeoutError:
            log.info("%s cancelling unfinished work count=%d", self._channel, self._running)


def _name(work: Callable[..., object]) -> str:
    return getattr(work, "__qualname__", None) or type(work).__name__
