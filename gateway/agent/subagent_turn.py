"""A background agent's own turn: one task, its own session, its own tool loop and limits.

It runs beside the chat that started it and holds none of that chat's locks. Its session
(`subagent:<id>`) is stored like any other (the task, each tool step before and after it runs,
the answer), so consolidation takes it up like any other. Its tools are the owner's private scope
without the owner-only tools (no `exec`: nobody is there to approve a command) and without
`spawn` and the scheduling tools (a background agent starts nothing that outlives it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from gateway.agent.context import ContextBuilder
from gateway.agent.tool_steps import run_tool_step
from gateway.agent.watchers import MemoryKeeper
from gateway.bus import InboundMessage
from gateway.llm.types import ChatProvider
from gateway.tools.files import MemorySeen, turn_memory
from gateway.tools.registry import turn_origin, turn_stream
from gateway.tools.scope import private_scope
from gateway.tools.toolbox import ToolBox
from memory.budget import PromptBudget
from memory.sessions.store import SessionStore

SESSION_PREFIX = "subagent:"
# The tools a background agent is never given, whatever its parent's scope offers.
WITHHELD = ("spawn", "schedule", "list_jobs", "cancel_job")

BACKGROUND = """\
## Working in the background
You are a background agent: the owner asked for one task to be done while they go on chatting.
Nobody reads your steps; work with the tools until the task is done, then give the result as
your final answer. It is sent to the owner's chat as it is, so make it complete and self-contained.
"""


@dataclass(frozen=True)
class Assignment:
    """What a background agent is asked to do, and for which chat (its parent)."""

    id: str
    label: str
    task: str
    parent: str  # the parent chat's session key
    channel: str
    chat_id: str
    sender_id: str
    sender_username: str | None = None  # where allow_from may list its starter by @name

    @property
    def session_key(self) -> str:
        return f"{SESSION_PREFIX}{self.id}"

    def origin(self) -> InboundMessage:
        """The message its tools see as asking: the parent's chat, under its own session."""
        return InboundMessage(
            channel=self.channel,
            chat_id=self.chat_id,
            sender_id=self.sender_id,
            sender_username=self.sender_username,
            text=self.task,
            sender_name=f"background task {self.id}",
            sender_is_owner=True,
            session_key=self.session_key,
        )


class SubagentTurn:
    """Runs one assignment to its final answer within `max_turns` model calls."""

    def __init__(
        self,
        *,
        provider: ChatProvider,
        sessions: SessionStore,
        tools: ToolBox,
        context: ContextBuilder,
        budget: PromptBudget,
        keeper: MemoryKeeper | None = None,
    ) -> None:
        self.provider = provider
        self.sessions = sessions
        self.tools = tools
        self.context = context
        self.budget = budget
        self.keeper = keeper

    async def run(self, job: Assignment, max_turns: int) -> str:
        """The background agent's final answer (or why it stopped without one)."""
        # This task's own context: the spawning turn's chat, stream and MEMORY.md are not its.
        turn_origin.set(job.origin())
        turn_stream.set(None)
        scope = private_scope(owner=False)
        tools = self.tools.for_scope(scope).without(*WITHHELD)
        schemas = tools.schemas()
        system = f"{await self.context.system_prompt(scope, schemas)}\n{BACKGROUND}"
        turn_memory.set(MemorySeen(self.context.memory_shown(scope)))
        session = await self.sessions.get(job.session_key)
        await self.sessions.add_messages(session, [{"role": "user", "content": job.task}])
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": self.context.user_content(job.origin())},
        ]
        try:
            for _ in range(max_turns):
                request = await asyncio.to_thread(self.budget.fit, messages, schemas, current=1)
                response = await self.provider.chat(request, schemas)
                if not response.tool_calls:
                    content = (response.content or "").strip() or "(no answer)"
                    await self.sessions.add_messages(
                        session, [{"role": "assistant", "content": content}]
                    )
                    return content
                messages.extend(await run_tool_step(self.sessions, session, response, tools))
                self.context.files_changed()
            return f"(stopped after {max_turns} model calls without a final answer)"
        finally:
            if self.keeper is not None:
                self.keeper.after_turn(session, system, schemas)
