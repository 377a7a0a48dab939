"""The consolidation model call: its prompt, the `save_memory` tool, the call and its validation.

The model is reached through `SummaryModel`, an interface defined here so this package never
imports the gateway. The request is measured with the same `PromptBudget` the agent uses, and a
request that would not fit is refused before it is sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from memory.budget import PromptBudget
from memory.consolidation.recall import RECALL_NOTE
from memory.errors import BudgetError, ModelCallError

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a memory consolidation agent. Call the save_memory tool with your consolidation "
    f"of the conversation. {RECALL_NOTE}"
)
# Forgotten lines shown to the model: the newest, each cut, so the prompt's fixed part stays small.
FORGOTTEN_SHOWN = 50
FORGOTTEN_LINE_CHARS = 200


class SummaryModel(Protocol):
    """The model call consolidation needs; the gateway adapts its chat provider to this."""

    async def call_tool(
        self, messages: list[dict[str, Any]], tool: dict[str, Any], *, force: bool
    ) -> Any:
        """Return the arguments the model gave the tool (any JSON shape), or None if it did not
        call it; raise ModelCallError (rejected_tool_choice=True if forcing was refused)."""
        ...


def save_memory_tool(with_memory: bool) -> dict[str, Any]:
    """The one tool of a consolidation call; group chats get no memory_update."""
    properties: dict[str, Any] = {
        "history_entry": {
            "type": "string",
            "description": (
                "A paragraph (2-5 sentences) summarising the key events, decisions and topics, "
                "starting with [YYYY-MM-DD HH:MM], with details useful for grep."
            ),
        }
    }
    if with_memory:
        properties["memory_update"] = {
            "type": "string",
            "description": (
                "The full updated MEMORY.md: all existing facts plus new ones; "
                "unchanged if nothing new."
            ),
        }
    return {
        "type": "function",
        "function": {
            "name": "save_memory",
            "description": "Save the consolidation of the conversation to long-term memory.",
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
        },
    }


def summary_prompt(
    lines: list[str],
    memory_text: str,
    with_memory: bool,
    forgotten: Sequence[str] = (),
    note: str = "",
) -> list[dict[str, Any]]:
    """The messages of one consolidation request: MEMORY.md (unless a group's), the chunk, then
    the lines the owner had forgotten and why the last answer was refused, if any."""
    parts = []
    if with_memory:
        parts.append(f"## Current MEMORY.md\n\n{memory_text.strip()}")
    parts.append("## Conversation to consolidate\n\n" + "\n".join(lines))
    if with_memory and forgotten:
        shown = [line[:FORGOTTEN_LINE_CHARS] for line in forgotten[-FORGOTTEN_SHOWN:]]
        parts.append(
            "## Forgotten at the owner's request\n\nThese lines were removed from MEMORY.md on "
            "purpose; never write them, or the same facts, back:\n" + "\n".join(shown)
        )
    if note:
        parts.append(f"## Your previous answer was refused\n\n{note}")
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


class Summariser:
    """Asks the model for one chunk's `history_entry` and `memory_update`, within `timeout`."""

    def __init__(
        self,
        model: SummaryModel,
        budget: PromptBudget,
        timeout: float,
        forgotten: Callable[[], list[str]] = list,
    ) -> None:
        self.model = model
        self.budget = budget
        self.timeout = timeout
        self.forgotten = forgotten  # read for every request: /forget may have added some

    def fixed_size(self, memory_text: str, with_memory: bool, *, at_most: bool = False) -> int:
        """Tokens of a request before any chunk line: the prompts, MEMORY.md and the tool (with
        `at_most`, an upper bound that needs no tokenizer)."""
        forgotten = self.forgotten() if with_memory else []
        messages = summary_prompt([], memory_text, with_memory, forgotten)
        tools = [save_memory_tool(with_memory)]
        return (
            self.budget.at_most(messages, tools) if at_most else self.budget.size(messages, tools)
        )

    async def ask(
        self, lines: list[str], memory_text: str, with_memory: bool, note: str = ""
    ) -> tuple[str, str]:
        """The validated (history_entry, memory_update); memory_update is "" for a group.
        `note` tells the model why its previous answer for these lines was refused."""
        tool = save_memory_tool(with_memory)
        forgotten = await asyncio.to_thread(self.forgotten) if with_memory else []
        messages = summary_prompt(lines, memory_text, with_memory, forgotten, note)
        if not await asyncio.to_thread(self.budget.fits, messages, [tool]):
            needed = await asyncio.to_thread(self.budget.size, messages, [tool])
            raise BudgetError(needed, self.budget.limit)
        arguments = await call_forced(self.model, messages, tool, self.timeout)
        return validate_arguments(arguments, with_memory)


async def call_forced(
    model: SummaryModel, messages: list[dict[str, Any]], tool: dict[str, Any], seconds: float
) -> Any:
    """The model's arguments to `tool`, forced by tool_choice (or "auto" if the provider refuses
    forcing); ModelCallError if no answer comes within `seconds`."""
    try:
        async with asyncio.timeout(seconds):
            try:
                return await model.call_tool(messages, tool, force=True)
            except ModelCallError as exc:
                if not exc.rejected_tool_choice:
                    raise
                log.info("provider refused forced tool_choice; retrying with auto")
                return await model.call_tool(messages, tool, force=False)
    except TimeoutError as exc:
        raise ModelCallError(f"no answer within {seconds:.0f}s") from exc


def validate_arguments(arguments: Any, with_memory: bool) -> tuple[str, str]:
    """Accept a dict, a JSON string or a one-element list; both fields must be non-empty text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ModelCallError(f"save_memory arguments are not JSON: {exc.msg}") from exc
    if isinstance(arguments, list) and len(arguments) == 1:
        arguments = arguments[0]
    if isinstance(arguments, str):  # JSON text that itself held a JSON string
        return validate_arguments(arguments, with_memory)
    if not isinstance(arguments, dict):
        raise ModelCallError("the model did not call save_memory with an object")
    history_entry = arguments.get("history_entry")
    memory_update = arguments.get("memory_update") if with_memory else ""
    if not isinstance(history_entry, str) or not history_entry.strip():
        raise ModelCallError("save_memory: history_entry is missing or empty")
    if with_memory and (not isinstance(memory_update, str) or not memory_update.strip()):
        raise ModelCallError("save_memory: memory_update is missing or empty")
    return history_entry, memory_update or ""
