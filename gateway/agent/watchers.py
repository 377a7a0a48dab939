"""Who hears about the agent's turns without the turn waiting for them: the memory keeper
(consolidation, told after each turn and each `/new`), the turn observer (the metrics), the
agent's activity (what optional work waits on, to start while no one waits for an answer), and
the figures one turn adds up for them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memory.sessions.file import Message
from memory.sessions.store import Session


class MemoryKeeper(Protocol):
    """Background housekeeping the agent notifies but never waits for (the consolidator)."""

    def after_turn(self, session: Session, system: str, tools: list[dict[str, Any]]) -> None: ...

    def after_rotate(self, key: str, archived: Path) -> None: ...


class TurnObserver(Protocol):
    """Receives figures about every turn (the metrics registry implements it)."""

    def message_in(self, channel: str) -> None: ...

    def message_out(self, channel: str, *, error: bool) -> None: ...

    def llm_call(self, seconds: float, prompt_tokens: int, completion_tokens: int) -> None: ...

    def turn_resumed(self) -> None: ...

    def reply_resent(self) -> None: ...


@dataclass
class TurnStats:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    # The stored, owed answer this turn returns (new, or one a restart kept from its chat).
    session: Session | None = None
    answer: Message | None = None


class Activity:
    """Counts the messages being answered, and says when none has been for a while."""

    def __init__(self) -> None:
        self._answering = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_end = time.monotonic()

    @contextmanager
    def answering(self) -> Iterator[None]:
        self._answering += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._answering -= 1
            self._last_end = time.monotonic()
            if not self._answering:
                self._idle.set()

    async def quiet_for(self, seconds: float) -> None:
        """Return once no message has been answered for `seconds` (at once if that holds)."""
        while True:
            await self._idle.wait()
            left = seconds - (time.monotonic() - self._last_end)
            if left <= 0:
                return
            await asyncio.sleep(left)  # then look again: a message may have come meanwhile
