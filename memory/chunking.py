"""Consolidation policy: how far a session should be consolidated now, and in which chunks.

Pure functions of plain values (messages, token counts, limits): no files, no model, no clock, so
every rule here can be checked with a list of dicts. A chunk always ends where a user message
starts, so a turn is never cut in two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory.session_file import Message


@dataclass(frozen=True)
class Trigger:
    """When a live session is due: its prompt reaches `consolidate_at` of `budget` tokens (then it
    goes down to `consolidate_to`), or `window` messages wait unconsolidated."""

    budget: int
    consolidate_at: float = 0.75
    consolidate_to: float = 0.5
    window: int = 100


def target(
    messages: Sequence[Message],
    start: int,
    tokens: Sequence[int],
    trigger: Trigger,
    *,
    system_tokens: int = 0,
    everything: bool = False,
    archive: bool = False,
) -> int | None:
    """The message index consolidation should reach now, at a user boundary; None if none.

    `tokens[i]` is the size of `messages[start + i]`; `system_tokens` the rest of the prompt.
    """
    count = len(messages)
    if count - start <= 0:
        return None
    if everything:
        if archive:
            return count  # an archive gets no more turns: all of it, trailing user included
        end = count
    else:
        end = start
        if count - start >= trigger.window:
            end = count - trigger.window // 2
        if system_tokens + sum(tokens) >= trigger.consolidate_at * trigger.budget:
            keep_at_most = trigger.consolidate_to * trigger.budget - system_tokens
            cut, kept = count, 0
            while cut > start and kept + tokens[cut - 1 - start] <= keep_at_most:
                kept += tokens[cut - 1 - start]
                cut -= 1
            end = max(end, cut)
        if end <= start:
            return None
    end = user_boundary(messages, end, start)
    return end if end > start else None


def split(
    messages: Sequence[Message],
    start: int,
    end: int,
    cost: Callable[[int], int],
    limit: int,
    most: int,
) -> list[tuple[int, int]]:
    """The first `most` pieces of [start, end), each at most `limit` (by `cost(index)`) and
    ending at a user boundary.

    A single turn larger than `limit` becomes one piece of its own rather than being cut.
    """
    chunks: list[tuple[int, int]] = []
    while start < end and len(chunks) < most:
        stop, used = start, 0
        while stop < end:
            size = cost(stop)
            if used + size > limit and stop > start:
                break
            used += size
            stop += 1
        if stop < end:
            boundary = user_boundary_before(messages, stop, start)
            stop = boundary if boundary > start else user_boundary(messages, stop, start)
        stop = min(stop, end)
        chunks.append((start, stop))
        start = stop
    return chunks


def user_boundary(messages: Sequence[Message], index: int, floor: int) -> int:
    """The first index >= `index` where a user message starts (or the end, if the last turn is
    complete): a chunk ending there never cuts a turn."""
    for position in range(max(index, floor + 1), len(messages)):
        if messages[position].get("role") == "user":
            return position
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        return len(messages)
    # The newest turn may still be running: stop before its user message.
    for position in range(len(messages) - 1, floor, -1):
        if messages[position].get("role") == "user":
            return position
    return floor


def user_boundary_before(messages: Sequence[Message], index: int, floor: int) -> int:
    """The last index in (floor, index] where a user message starts; `floor` if none."""
    for position in range(min(index, len(messages) - 1), floor, -1):
        if messages[position].get("role") == "user":
            return position
    return floor
