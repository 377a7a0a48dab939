"""The one clock of the scheduler: wall time in epoch seconds, and a wait that a wake-up cuts short.

Jobs are due at calendar times, so this is the wall clock, not the monotonic one. Tests pass a
clock they move by hand, so a job due in two minutes fires without anyone waiting two minutes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

# A long sleep is cut into pieces so a wall clock that jumps (NTP, a suspended laptop) is noticed
# within this many seconds; it is not a polling period, a wake-up still ends the wait at once.
MAX_NAP = 300.0


class Clock(Protocol):
    """Now, and a wait until a time or until `wake` is set, whichever comes first."""

    def __call__(self) -> float: ...

    async def sleep_until(self, when: float | None, wake: asyncio.Event) -> None: ...


class SystemClock:
    """`time.time()`, and asyncio's timers for the waits."""

    def __call__(self) -> float:
        return time.time()

    async def sleep_until(self, when: float | None, wake: asyncio.Event) -> None:
        timeout = None if when is None else min(max(0.0, when - time.time()), MAX_NAP)
        try:
            async with asyncio.timeout(timeout):
                await wake.wait()
        except TimeoutError:
            pass
