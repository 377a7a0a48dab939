"""Compaction of an oversized MEMORY.md toward `memory.max_memory_tokens`, keeping its facts.

A MEMORY.md too large for one prompt is cut into parts at line boundaries, each part fitting the
prompt budget; the model rewrites each part shorter (merging repeats, keeping every distinct fact),
and the parts are joined again. The result replaces MEMORY.md only if nobody changed it meanwhile
(the writer's compare-and-write); the previous text is kept under versions/ as for every write.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from memory.budget import PromptBudget
from memory.consolidation.summariser import SummaryModel, call_forced
from memory.errors import ModelCallError
from memory.files import MemoryFiles

log = logging.getLogger(__name__)

COMPACT_PROMPT = (
    "You are a memory compaction agent. The user message holds one part of a MEMORY.md file that "
    "has grown too large. Call compact_memory with that part rewritten shorter: merge repeated "
    "and overlapping lines, keep every distinct fact, keep Markdown headings. Drop nothing that "
    "is not a repeat."
)
PART_HEADER = "## Part of MEMORY.md to compact"
MAX_PASSES = 3  # whole-file passes; each must shrink the file or compaction stops


def compact_tool() -> dict[str, Any]:
    """The one tool of a compaction call."""
    return {
        "type": "function",
        "function": {
            "name": "compact_memory",
            "description": "Save the compacted part of MEMORY.md.",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {
                        "type": "string",
                        "description": "The part, rewritten shorter with every distinct fact kept.",
                    }
                },
                "required": ["text"],
            },
        },
    }


class MemoryCompactor:
    """Brings MEMORY.md under `max_tokens` when it has grown past it."""

    def __init__(
        self,
        files: MemoryFiles,
        budget: PromptBudget,
        model: SummaryModel,
        max_tokens: int,
        timeout: float,
    ) -> None:
        self.files = files
        self.budget = budget
        self.model = model
        # A consolidation prompt carries MEMORY.md and its answer repeats it, beside the
        # conversation: past a quarter of the budget, the configured figure cannot be kept.
        self.max_tokens = min(max_tokens, budget.limit // 4)
        self.timeout = timeout
        self.runs = 0
        self._within: tuple[int, int, int] | None = None  # a MEMORY.md counted within

    def may_be_oversized(self) -> bool:
        """False when MEMORY.md is surely within the limit, told by one stat: it has no more
        bytes than the limit has tokens, or it is the file a count last found within."""
        try:
            return self._may_be_over(self.files.memory_md.stat())
        except FileNotFoundError:
            return False

    def _may_be_over(self, stat: os.stat_result) -> bool:
        # A token is at least one byte.
        return stat.st_size > self.max_tokens and _version(stat) != self._within

    def oversized(self) -> str | None:
        """MEMORY.md's text if it is over the limit, else None (cheap when it is small)."""
        try:
            stat = self.files.memory_md.stat()
        except FileNotFoundError:
            return None
        if not self._may_be_over(stat):
            return None
        text = self.files.read_memory()
        if self.budget.counter.count(text) > self.max_tokens:
            return text
        # Stat taken before the read: should the file change in between, the next stat differs.
        self._within = _version(stat)
        return None

    async def compact_if_needed(self) -> bool:
        """Compact MEMORY.md if it is over the limit; True if it was rewritten."""
        original = await asyncio.to_thread(self.oversized)
        if original is None:
            return False
        text, size = original, await asyncio.to_thread(self.budget.counter.count, original)
        for _ in range(MAX_PASSES):
            shorter = await self._pass(text, size)
            new_size = await asyncio.to_thread(self.budget.counter.count, shorter)
            if new_size >= size:
                break  # the model could not shorten it further; keep what was gained
            text, size = shorter, new_size
            if size <= self.max_tokens:
                break
        if text == original:
            log.warning("MEMORY.md is over max_memory_tokens but could not be compacted")
            return False
        # Raises MemoryChangedError if someone wrote MEMORY.md meanwhile: compaction is retried.
        await self.files.awrite_memory(text, expected=original)
        self.runs += 1
        log.info(
            "compacted MEMORY.md tokens=%d target=%d chars=%d->%d",
            size,
            self.max_tokens,
            len(original),
            len(text),
        )
        return True

    async def _pass(self, text: str, size: int) -> str:
        parts = await asyncio.to_thread(self._split, text)
        compacted = []
        for part, tokens in parts:
            target = max(64, self.max_tokens * tokens // max(size, 1))
            compacted.append(await self._ask(part, target))
        return "\n".join(p.rstrip("\n") for p in compacted) + "\n"

    def _split(self, text: str) -> list[tuple[str, int]]:
        """Parts of whole lines, each small enough for a compaction prompt and its answer."""
        overhead = self.budget.size(
            [{"role": "system", "content": COMPACT_PROMPT}], [compact_tool()]
        )
        # Half of what is left: the rewritten part has to fit the model's answer too.
        limit = max(256, (self.budget.limit - overhead - 64) // 2)
        counter = self.budget.counter
        parts: list[tuple[str, int]] = []
        lines: list[str] = []
        used = 0
        for line in text.splitlines(keepends=True):
            cost = counter.count(line)
            if cost > limit:  # one enormous line: cut it rather than fail
                line, cost = counter.truncate(line, limit) + "\n", limit
            if lines and used + cost > limit:
                parts.append(("".join(lines), used))
                lines, used = [], 0
            lines.append(line)
            used += cost
        if lines:
            parts.append(("".join(lines), used))
        return parts

    async def _ask(self, part: str, target: int) -> str:
        messages = [
            {"role": "system", "content": COMPACT_PROMPT},
            {
                "role": "user",
                "content": f"Aim for at most {target} tokens.\n\n{PART_HEADER}\n\n{part}",
            },
        ]
        arguments = await call_forced(self.model, messages, compact_tool(), self.timeout)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as exc:
                raise ModelCallError(f"compact_memory arguments are not JSON: {exc.msg}") from exc
        compacted = arguments.get("text") if isinstance(arguments, dict) else None
        if not isinstance(compacted, str) or not compacted.strip():
            raise ModelCallError("compact_memory: text is missing or empty")
        return compacted


def _version(stat: os.stat_result) -> tuple[int, int, int]:
    """Which MEMORY.md this is: an atomic rewrite is a new inode, an edit in place a new size or
    modification time."""
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)
