"""The tool steps of a turn, stored so that a restart never runs a tool twice.

A step's calls are stored before any tool runs and each result as soon as it is in; after a crash
the calls left without a result get one saying so, instead of running again (they may have had
effects already). Tool results over `MAX_STORED_TOOL_RESULT` characters are stored truncated.
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.llm.types import ChatResponse
from gateway.tools.registry import ToolRegistry
from memory.sessions.file import Message
from memory.sessions.store import INTERRUPTED_TOOL, Session, SessionStore, unanswered_calls

log = logging.getLogger(__name__)

MAX_STORED_TOOL_RESULT = 16_000  # characters of one tool result kept in the session file


async def run_tool_step(
    sessions: SessionStore, session: Session, response: ChatResponse, tools: ToolRegistry
) -> list[dict[str, Any]]:
    """Run the tools one model answer asked for; returns the step (the call and every result)
    whole, for the next request, while the session keeps long results truncated."""
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in response.tool_calls
    ]
    step: list[dict[str, Any]] = [
        {"role": "assistant", "content": response.content or "", "tool_calls": calls}
    ]
    await sessions.add_messages(session, step)
    for call in response.tool_calls:
        log.debug("tool call name=%s", call.name)
        output = await tools.execute(call.name, call.arguments)
        result = {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": output}
        step.append(result)
        await sessions.add_messages(session, [for_storage(result)])
    return step


async def close_interrupted(
    sessions: SessionStore, session: Session, steps: list[Message]
) -> list[Message]:
    """Store a result saying so for each call of `steps` a restart cut short; the model decides
    what to tell the person. Returns `steps` with those results."""
    results = [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": call.get("function", {}).get("name", ""),
            "content": INTERRUPTED_TOOL,
        }
        for call in unanswered_calls(steps)
    ]
    if not results:
        return steps
    log.info("tool calls interrupted by a restart session=%s count=%d", session.key, len(results))
    await sessions.add_messages(session, results)
    return [*steps, *session.messages[-len(results) :]]


def for_storage(message: dict[str, Any]) -> dict[str, Any]:
    """A tool result over the limit, truncated with a marker saying how much was cut."""
    content = message.get("content")
    if message.get("role") != "tool" or not isinstance(content, str):
        return message
    if len(content) <= MAX_STORED_TOOL_RESULT:
        return message
    cut = len(content) - MAX_STORED_TOOL_RESULT
    return {
        **message,
        "content": f"{content[:MAX_STORED_TOOL_RESULT]}\n[... {cut} characters truncated]",
    }
