"""Consolidation's model: the chat provider adapted to memory's `SummaryModel`, errors translated.

A model asked for a tool call gets the tool forced; one that cannot call tools (`llm.tools: off`,
refused by the endpoint, or a forced call answered with text) is asked for the same arguments as
one JSON object in plain text: the last rung of the forced -> auto -> text ladder. Memory validates
either answer the same way. Each call has its own output limit (`OutputLimit`), not the replies'.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.errors import LLMError, LLMStatusError, LLMToolsUnsupportedError
from gateway.llm.arguments import valid_arguments
from gateway.llm.types import ChatProvider, ForcedCalls, ToolSupport
from memory.errors import ModelCallError

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
HISTORY_ROOM = 512  # tokens for the history entry beside MEMORY.md's rewrite
MARGIN = 1024  # tokens kept free of the context, as the prompt budget keeps them


@dataclass(frozen=True, slots=True)
class OutputLimit:
    """How much one consolidation call may write: all of MEMORY.md at its cap (`memory_cap`),
    with a quarter more for the facts it adds and JSON's escapes, plus the history entry; never
    less than a reply may (`reply_tokens`), never more than the context leaves after the prompt
    (`measure` counts it). `llm.max_tokens` is sized for replies: 256 cannot hold a rewrite.
    Where an upper bound of the prompt (`bound`, no tokenizer) leaves all that is wanted, nothing
    is counted: the count would leave it too."""

    reply_tokens: int
    memory_cap: int
    context_window: int
    measure: Callable[[list[dict[str, Any]], list[dict[str, Any]]], int]
    bound: Callable[[list[dict[str, Any]], list[dict[str, Any]]], int] | None = None

    async def tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        wanted = max(self.reply_tokens, self.memory_cap * 5 // 4 + HISTORY_ROOM)
        if self.bound is not None:
            room = self.context_window - self.bound(messages, tools) - MARGIN
            if room >= wanted:  # by the bound: the exact count would leave it all too
                return wanted
        used = await asyncio.to_thread(self.measure, messages, tools)
        return max(self.reply_tokens, min(wanted, self.context_window - used - MARGIN))


class ProviderSummaryModel:
    """memory's `SummaryModel` over a chat provider; one per process, so its switch to JSON text
    holds for every consolidation and compaction after it."""

    def __init__(
        self,
        provider: Callable[[], ChatProvider],
        tool_support: ToolSupport | None = None,
        output: OutputLimit | None = None,
    ) -> None:
        self._provider = provider  # the client, made by the first call that needs it
        self._tool_support = tool_support
        # None: the provider's own max_tokens. The runtime sets it once its prompt budget,
        # which measures the prompt, exists.
        self.output = output
        self._forced = ForcedCalls(tool_support.mode if tool_support is not None else "auto")

    async def call_tool(
        self, messages: list[dict[str, Any]], tool: dict[str, Any], *, force: bool
    ) -> Any:
        if not self._forced.enabled or (
            self._tool_support is not None and not self._tool_support.enabled
        ):
            return await self._ask_as_text(messages, tool)
        name = tool["function"]["name"]
        choice: str | dict[str, Any] = (
            {"type": "function", "function": {"name": name}} if force else "auto"
        )
        provider = self._provider()
        limit = await self._limit(messages, [tool])
        try:
            response = await provider.chat(messages, [tool], tool_choice=choice, max_tokens=limit)
        except LLMToolsUnsupportedError as exc:
            if self._tool_support is None or self._tool_support.enabled:
                raise ModelCallError(str(exc)) from exc
            return await self._ask_as_text(messages, tool)
        except LLMStatusError as exc:
            refused = exc.status in (400, 422) and "tool_choice" in str(exc)
            raise ModelCallError(str(exc), rejected_tool_choice=refused) from exc
        except LLMError as exc:
            raise ModelCallError(str(exc)) from exc
        for call in response.tool_calls:
            if call.name == name:
                return call.arguments
        # A forced call answered with no call at all: the server took `tools` and ignored them.
        # Asked again at once as text, this chunk need not fail three times and end raw.
        if force and not response.tool_calls and self._forced.refused(provider.model):
            return await self._ask_as_text(messages, tool)
        return None

    async def _ask_as_text(self, messages: list[dict[str, Any]], tool: dict[str, Any]) -> Any:
        parameters = tool["function"]["parameters"]
        keys = ", ".join(f'"{key}"' for key in parameters["properties"])
        described = "\n".join(
            f"- {key}: {schema.get('description', '')}"
            for key, schema in parameters["properties"].items()
        )
        instruction = (
            f"Reply with one JSON object and nothing else, with the keys {keys}:\n{described}"
        )
        asked = [*messages, {"role": "user", "content": instruction}]
        limit = await self._limit(asked, [])
        try:
            response = await self._provider().chat(asked, max_tokens=limit)
        except LLMError as exc:
            raise ModelCallError(str(exc)) from exc
        cut = response.finish_reason == "length"
        return valid_arguments(json_text(response.content or ""), cut)

    async def _limit(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> int | None:
        return None if self.output is None else await self.output.tokens(messages, tools)


def json_text(content: str) -> str:
    """The JSON object of a text answer, without the code fence small models like to add."""
    content = content.strip()
    fenced = _FENCE.match(content)
    if fenced:
        return fenced.group(1)
    start, end = content.find("{"), content.rfind("}")
    return content[start : end + 1] if 0 <= start < end else content
