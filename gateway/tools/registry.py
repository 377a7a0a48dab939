"""The tool registry: named tools with their JSON schemas, run so that every failure becomes text
the model reads; and which chat the running turn answers (`turn_origin`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from gateway.bus import InboundMessage, ReplyStream
from gateway.errors import describe_errors

log = logging.getLogger(__name__)

# The message the running turn answers, set by the agent in the turn's own task: tools that act
# for a chat (scheduling a reminder) read which chat that is, never the model's say-so.
turn_origin: ContextVar[InboundMessage | None] = ContextVar("turn_origin", default=None)
# Where the running turn's answer is shown as it is written, if anywhere: a tool that must show
# something at once (exec's request for approval) can put it there when no message can go out.
turn_stream: ContextVar[ReplyStream | None] = ContextVar("turn_stream", default=None)


class ToolError(Exception):
    """A tool could not do what was asked; the message goes back to the model."""


ToolFunc = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolFunc

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    """Named tools with their JSON schemas."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._schemas: list[dict[str, Any]] | None = None

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool
        self._schemas = None

    def schemas(self) -> list[dict[str, Any]]:
        """The tools' JSON schemas: one list, built once (until a tool is added), which callers
        only read; the budget recognises it and measures it once."""
        if self._schemas is None:
            self._schemas = [tool.schema() for tool in self._tools.values()]
        return self._schemas

    def names(self) -> list[str]:
        return list(self._tools)

    def without(self, *names: str) -> ToolRegistry:
        """A new registry of these tools but `names` (a background agent's narrower set)."""
        narrower = ToolRegistry()
        for tool in self._tools.values():
            if tool.name not in names:
                narrower.add(tool)
        return narrower

    async def execute(self, name: str, raw_arguments: str) -> str:
        """Run a tool; every failure becomes an `Error: …` text for the model."""
        tool = self._tools.get(name)
        if tool is None:
            log.warning("model called an unknown tool tool=%s", name[:64])
            return f"Error: unknown tool {name!r}. Available: {', '.join(self._tools)}"
        try:
            arguments = json.loads(raw_arguments or "{}")
        except json.JSONDecodeError as exc:
            log.warning("model sent arguments that are not JSON tool=%s error=%s", name, exc.msg)
            return f"Error: arguments are not valid JSON ({exc.msg})"
        if not isinstance(arguments, dict):
            log.warning("model sent arguments that are not an object tool=%s", name)
            return "Error: arguments must be a JSON object"
        missing = [k for k in tool.parameters.get("required", []) if k not in arguments]
        if missing:
            log.warning("model left out arguments tool=%s missing=%s", name, ",".join(missing))
            return f"Error: missing required argument(s): {', '.join(missing)}"
        try:
            return await tool.run(arguments)
        except ToolError as exc:
            log.info("tool refused tool=%s reason=%s", name, exc)
            return f"Error: {exc}"
        except Exception as exc:
            # The model reads the failure and decides; the turn goes on, so this is no boundary
            # of the message, only of the tool call.
            log.error("tool failed tool=%s error=%s", name, describe_errors(exc))
            log.debug("tool failure traceback tool=%s", name, exc_info=True)
            return f"Error: {name} failed ({type(exc).__name__})"
