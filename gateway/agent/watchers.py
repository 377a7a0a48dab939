"""Who hears about the agent's turns without the turn waiting for them: the memory keeper
(consolidation, told after each turn and each `/new`) and the turn observer (the metrics), and
the figures one turn adds up for them."""

from __future__ import annotations

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
