"""Consolidation policy: how far a session should be consolidated now, and in which chunks.

Pure functions of plain values (messages, token counts, limits): no files, no model, no clock, so
every rule here can be checked with a list of dicts. A chunk always ends where a user message
starts, so a turn is never cut in two.

A run consolidates at least what is due and, since each call costs its fixed prompt (instructions,
MEMORY.md, the tool) whatever the chunk, it fills its last chunk with the next whole turns up to
what one call may hold, always leaving the newest KEEP_TURNS turns in the conversation. A chunk
closes only when the next whole turn would not fit its call, so a backlog takes as few calls as
turn boundaries allow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memory.sessions.file import Message

# Turns a run never consolidates, however much room its last call has: the conversation the
# model sees right after a consolidation still holds its latest exchanges word for word.
KEEP_TURNS = 4


@dataclass(frozen=True)
class Trigger:
    """When a live session is due: its prompt reaches `consolidate_at` of `budget` tokens (then it
    goes down to `consolidate_to`), or `window` messages wait unconsolidated."""

    budget: int
    consolidate_at: float = 0.75
    consolidate_to: float = 0.5
    window: int = 100

    def may_fire(self, at_most: int) -> bool:
        """Whether a prompt of at most `at_most` tokens may reach the size rule: if not, `target`
        decides the same on upper bounds as on exact counts, and nothing needs counting."""
        return at_most >= self.consolidate_at * self.budget


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
    reach: int | None = None,
) -> list[tuple[int, int]]:
    """The first `most` pieces of [start, end), each at most `limit` (by `cost(index)`) and
    ending at a user boundary; the last one then takes whole turns after `end`, up to `reach`,
    while they fit in `limit`.

    A single turn larger than `limit` becomes one piece of its own rather than being cut.
    """
    chunks: list[tuple[int, int]] = []
    used = 0
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
            used = -1  # cut short of `end`: no room to fill
        stop = min(stop, end)
        chunks.append((start, stop))
        start = stop
    if chunks and chunks[-1][1] == end and used >= 0 and reach is not None:
        first, stop = chunks[-1]
        chunks[-1] = (first, _filled(messages, stop, reach, cost, limit - used))
    return chunks


def _filled(
    messages: Sequence[Message], stop: int, reach: int, cost: Callable[[int], int], room: int
) -> int:
    """`stop` moved past the whole turns after it that fit in `room`, never beyond `reach`."""
    while stop < reach:
        turn_end = user_boundary(messages, stop + 1, stop)
        if turn_end <= stop or turn_end > reach:
            break
        size = sum(cost(index) for index in range(stop, turn_end))
        if size > room:
            break
        room -= size
        stop = turn_end
    return stop


def keep_from(messages: Sequence[Message], start: int, turns: int = KEEP_TURNS) -> int:
    """Where the newest `turns` turns begin (a user message); `start` if there are fewer."""
    seen = 0
    for position in range(len(messages) - 1, start, -1):
        if messages[position].get("role") == "user":
            seen += 1
            if seen == turns:
                return position
    return start


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
