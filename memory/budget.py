"""The prompt budget: the one place that decides whether a request fits the model, and makes it fit.

The agent asks it before every provider call of a turn, the consolidator to size its chunks and
before every consolidation call (the app passes both the same object), and the prompt builder for
the share each fixed file (bootstrap files, MEMORY.md, today's note) may take. Counting uses the
same `TokenCounter` as everything else, so the figure checked here is the figure a request
carries. Also home of the one tool-result cap. Imports nothing of the gateway.

The limit is set in the model server's tokens (the configured window less the answer); `limit` is
that in memgate's counted tokens, by the calibration learnt from the server (memory/calibration.py),
so every decision here follows what the server said about its own tokenizer.

Every decision here is "does it fit", and each is taken on upper bounds first (a text's UTF-8
bytes, `TokenCounter.at_most`): where the bounds fit, the exact counts fit too and the answer is
the same, without the tokenizer's vocabulary. Only where the bounds are over is anything counted.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memory.calibration import TokenCalibration
from memory.errors import BudgetError
from memory.sessions.store import Session, history_window, legal_messages, window_start

log = logging.getLogger(__name__)

Message = dict[str, Any]
# Room kept for the marker that replaces what was cut (its own tokens, counted generously).
_MARKER_TOKENS = 40
_COUNT_CACHE = 4096  # message texts whose count is remembered
# Characters of a tool result kept where a conversation is shown as lines (consolidation prompts,
# memory_get): the model's answer carries what mattered, the result itself is mostly bulk.
TOOL_RESULT_CHARS = 300


class Counter(Protocol):
    """What the budget needs from a tokenizer."""

    def count(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_tools(self, tools: list[dict[str, Any]]) -> int: ...

    def truncate(self, text: str, tokens: int) -> str: ...

    def at_most(self, text: str) -> int: ...

    def at_most_message(self, message: Message) -> int: ...

    def at_most_tools(self, tools: list[dict[str, Any]]) -> int: ...


@dataclass(frozen=True)
class Part:
    """A named text of the prompt (a bootstrap file, MEMORY.md, the daily note, a document)."""

    name: str
    text: str


class PromptBudget:
    """`limit` tokens for a whole request; `fixed_share` of it for the files of the system prompt."""

    def __init__(
        self,
        limit: int,
        counter: Counter,
        fixed_share: float = 0.5,
        calibration: TokenCalibration | None = None,
    ) -> None:
        if limit <= 0:
            raise ValueError(f"budget must be positive, got {limit}")
        self.base_limit = limit  # in the server's tokens
        self.counter = counter
        self.fixed_share = fixed_share
        self.calibration = calibration or TokenCalibration(None, "")
        # Counts by message text: the system prompt and the history are the same strings on
        # every call of a turn (and of the next turns), so each is tokenized once.
        self._counts: dict[tuple[str, str], int] = {}

    @property
    def limit(self) -> int:
        """The limit in counted tokens: the configured one scaled by the calibration."""
        return self.calibration.scaled(self.base_limit)

    # -- the whole request -----------------------------------------------------------------------
    def size(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        """Tokens of a request: every message plus the tool schemas."""
        total = sum(self._count(m) for m in messages)
        return total + (self._count_tools(tools) if tools else 0)

    def server_size(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """`size` in the model server's tokens, as the calibration has it (for sums against
        the context window, which the server counts)."""
        return math.ceil(self.size(messages, tools) * self.calibration.ratio)

    def server_at_most(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> int:
        """An upper bound of `server_size` that needs no tokenizer."""
        return math.ceil(self.at_most(messages, tools) * self.calibration.ratio)

    def at_most(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        """An upper bound of `size(messages, tools)` that needs no tokenizer."""
        total = sum(self.counter.at_most_message(m) for m in messages)
        return total + (self.counter.at_most_tools(tools) if tools else 0)

    def fits(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> bool:
        """Whether the request is within the limit: by the bound where that settles it."""
        return (
            self.at_most(messages, tools) <= self.limit or self.size(messages, tools) <= self.limit
        )

    def history_by_bound(
        self,
        session: Session,
        head: list[Message],
        tools: list[dict[str, Any]],
        *,
        end: int,
        max_messages: int = 0,
    ) -> list[Message] | None:
        """The whole history window (see `history`) if the bounds show it all fits beside `head`
        and `tools`; None when only exact counts can tell. Cheap: its work stops at the limit."""
        start = window_start(session, end, max_messages)
        used, limit = self.at_most(head, tools), self.limit
        for index in range(end - 1, start - 1, -1):  # newest first: a long one ends it soonest
            if used > limit:
                return None
            used += session.bound(index, self.counter)
        return legal_messages(session.messages[start:end]) if used <= limit else None

    def history(
        self,
        session: Session,
        head: list[Message],
        tools: list[dict[str, Any]],
        *,
        end: int,
        max_messages: int = 0,
    ) -> list[Message]:
        """The newest messages of `session` before `end` that fit beside `head` (the system
        prompt, the current message) and `tools`, as `history_window` chooses them.

        Raises BudgetError when `head` and `tools` alone are over the limit. Decided by bounds
        when everything fits by them, by exact counts otherwise: run it in a worker thread.
        """
        window = self.history_by_bound(session, head, tools, end=end, max_messages=max_messages)
        if window is not None:
            return window
        fixed = self.size(head, tools)
        if fixed > self.limit:
            raise BudgetError(fixed, self.limit)
        return history_window(session, self.counter, self.limit - fixed, max_messages, end)

    def _count_tools(self, tools: list[dict[str, Any]]) -> int:
        # The same schemas go with every call of every turn of a scope: tokenized once. The text
        # is the key (not the list), so a tool that changes its schema is counted afresh.
        text = json.dumps(tools, ensure_ascii=False)
        count = self._counts.get(("tools", text))
        if count is None:
            if len(self._counts) >= _COUNT_CACHE:
                self._counts.clear()
            count = self._counts["tools", text] = self.counter.count(text)
        return count

    def _count(self, message: Message) -> int:
        content = message.get("content")
        if not isinstance(content, str) or message.get("tool_calls"):
            return self.counter.count_message(message)
        key = (str(message.get("role")), content)
        count = self._counts.get(key)
        if count is None:
            if len(self._counts) >= _COUNT_CACHE:
                self._counts.clear()
            count = self._counts[key] = self.counter.count_message(message)
        return count

    def fit(
        self, messages: list[Message], tools: list[dict[str, Any]], *, current: int
    ) -> list[Message]:
        """A copy of `messages` that fits the limit; raise BudgetError if nothing makes it fit.

        `messages[0]` is the system prompt and `messages[current]` the message this turn answers;
        both stay. Older history (between them) goes first, oldest first and never leaving a tool
        result without its call; then tool results of this turn are cut, largest first, each with
        a marker saying how much was cut.
        """
        if self.fits(messages, tools):
            return messages
        head, history, turn = messages[:1], messages[1:current], messages[current:]
        fixed = self.size(head + turn, tools)
        while history and fixed + self.size(history) > self.limit:
            history = legal_messages(history[1:])
        if fixed + self.size(history) <= self.limit:
            return head + history + turn
        turn = self._cut_tool_results(turn, excess=self.size(head + turn, tools) - self.limit)
        fitted = head + turn
        used = self.size(fitted, tools)
        if used > self.limit:
            raise BudgetError(used, self.limit)
        return fitted

    def _cut_tool_results(self, turn: list[Message], excess: int) -> list[Message]:
        turn = list(turn)
        sizes = sorted(
            (
                (self.counter.count(m["content"]), index)
                for index, m in enumerate(turn)
                if m.get("role") == "tool" and isinstance(m.get("content"), str)
            ),
            reverse=True,
        )
        for tokens, index in sizes:
            if excess <= 0:
                break
            keep = max(0, tokens - excess - _MARKER_TOKENS)
            content = turn[index]["content"]
            kept = self.counter.truncate(content, keep)
            marker = (
                f"\n[... memgate cut this tool result to fit the model's context: "
                f"{len(content) - len(kept)} of {len(content)} characters not shown]"
            )
            turn[index] = {**turn[index], "content": kept + marker}
            excess -= tokens - self.counter.count(turn[index]["content"])
        return turn

    # -- the fixed parts of the system prompt ---------------------------------------------------
    def cap_parts(
        self,
        parts: list[Part],
        around: Sequence[str] = (),
        tools: list[dict[str, Any]] | None = None,
    ) -> list[Part]:
        """Cut the parts that are over their share, each with a marker and a warning naming it.

        The fixed files together get `fixed_share` of what the `tools`' schemas leave of the
        limit (they go with every request too), less the texts `around` them (headings,
        instructions); a file smaller than an even split keeps all of it and leaves the rest to
        the others. So the system prompt and the tools never take more than the limit, however
        many tools a chat is offered, and leave the history and the message at least the rest of
        the share. When even the bounds fit, nothing is cut and nothing counted exactly.
        """
        at_most = self.counter.at_most
        bound = self.counter.at_most_tools(tools) if tools else 0
        wanted = sum(map(at_most, around)) + sum(at_most(part.text) for part in parts)
        if wanted <= int((self.limit - bound) * self.fixed_share):
            return list(parts)
        left = self.limit - (self._count_tools(tools) if tools else 0)
        share = int(max(0, left) * self.fixed_share)
        room = max(0, share - sum(self.counter.count(text) for text in around))
        sizes = {part.name: self.counter.count(part.text) for part in parts}
        shares = allocate(sizes, room)
        capped = []
        for part in parts:
            share, size = shares[part.name], sizes[part.name]
            if size > share:
                log.warning(
                    "prompt file over its share, cut file=%s tokens=%d share=%d",
                    part.name,
                    size,
                    share,
                )
            capped.append(self.cap_text(part, share, size))
        return capped

    def cap_text(self, part: Part, share: int, size: int | None = None) -> Part:
        """The part cut to `share` tokens with a marker naming it, or the part itself if it fits.

        Also what a document's extracted text goes through before it joins the current message.
        """
        if size is None:
            if self.counter.at_most(part.text) <= share:
                return part
            size = self.counter.count(part.text)
        if size <= share:
            return part
        kept = self.counter.truncate(part.text, max(0, share - _MARKER_TOKENS))
        marker = (
            f"\n\n[... memgate cut {part.name} here to fit the model's context: "
            f"{len(part.text) - len(kept)} of {len(part.text)} characters not shown]"
        )
        return Part(part.name, kept + marker)


def allocate(sizes: dict[str, int], room: int) -> dict[str, int]:
    """Split `room` tokens among named sizes: small ones get all they need, big ones share the rest."""
    shares: dict[str, int] = {}
    waiting = sorted(sizes, key=lambda name: sizes[name])
    left = room
    while waiting:
        even = left // len(waiting)
        name = waiting[0]
        if sizes[name] <= even:
            shares[name] = sizes[name]
            left -= sizes[name]
            waiting.pop(0)
            continue
        for name in waiting:
            shares[name] = even
        break
    return shares
