"""The commands the agent answers itself: `/new`, `/stop`, `/status`, `/help` and the rest of
`AGENT_COMMANDS`, each outside the turn, so `/stop` or `/approve` never waits behind the turn it
is about.

The registry and the parsing are gateway/agent/commands/registry.py's, the turn gateway/agent/loop.py's;
the loop hands in what the commands need of its turns as three calls (a session's lock, stopping
its turn, waiting for its answers to be sent).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from gateway.agent.commands.memory import MEMORY_COMMANDS, MemoryCommands
from gateway.agent.commands.registry import AGENT_COMMANDS, command_args, help_text, parse_command
from gateway.agent.commands.status import chat_status
from gateway.agent.context import ContextBuilder
from gateway.agent.session_lock import SessionLock
from gateway.agent.subagents import Subagents, stop_reply
from gateway.agent.watchers import MemoryKeeper
from gateway.bus import Button, InboundMessage, typed_command
from gateway.config.models import Config
from gateway.skills.prompt import skills_reply
from gateway.tools.scope import GROUP, scope_for
from gateway.tools.toolbox import ToolBox
from memory.budget import PromptBudget
from memory.files import MemoryFiles
from memory.forgotten import FORGOTTEN_FILE, ForgottenLines
from memory.sessions.store import SessionStore
from memory.tokens import TokenCounter

NEW_SESSION_REPLY = "New session started."
UNSENT_WAIT = 10.0  # seconds /new waits for the chat's answers to be sent before rotating


class AgentCommands:
    """Answers a message that is a command; any other message is the turn's."""

    def __init__(
        self,
        *,
        config: Config,
        sessions: SessionStore,
        memory: MemoryFiles,
        counter: TokenCounter,
        budget: PromptBudget,
        tools: ToolBox,
        context: ContextBuilder,
        keeper: MemoryKeeper | None,
        lock: Callable[[str], SessionLock],  # a session's turns' lock
        stop_turn: Callable[[str], bool],  # cancel a session's running turn; False if none
        replies_sent: Callable[[str], Awaitable[None]],  # until a session's answers are sent
        jobs_command: Callable[[str, InboundMessage], str] | None = None,
    ) -> None:
        self.config = config
        self.sessions = sessions
        self.memory = memory
        self.counter = counter
        self.budget = budget
        self.tools = tools
        self.context = context
        self.keeper = keeper
        self._lock = lock
        self._stop_turn = stop_turn
        self._replies_sent = replies_sent
        self.jobs_command = jobs_command  # `/jobs`, answered by the scheduler's side
        forgotten = ForgottenLines(config.state_dir / FORGOTTEN_FILE)
        self.memory_commands = MemoryCommands(memory, forgotten)  # `/memory`, `/forget`
        self.subagents: Subagents | None = None  # background agents (`spawn`), where they run

    async def answer(self, message: InboundMessage) -> str | None:
        """The answer to `message` if it is a command (an unknown one gets /help's list with
        it); None for a message the turn answers."""
        command = parse_command(message.text)
        if command is None:
            return None
        if command.name not in AGENT_COMMANDS:
            unknown = typed_command(message.channel, f"/{command.name}")
            return f"Unknown command {unknown}.\n\n{help_text(message.channel)}"
        return await self._command(command.name, message)

    def buttons(self, message: InboundMessage) -> tuple[Button, ...]:
        """The buttons under a command's answer: /forget's listing, Forget or Keep."""
        return self.memory_commands.buttons(message)

    async def _command(self, name: str, message: InboundMessage) -> str:
        key = message.key
        if name == "help":
            return help_text(message.channel)
        if name == "stop":
            tasks = await self.subagents.stop(key) if self.subagents is not None else 0
            return stop_reply(self._stop_turn(key), tasks)
        if name == "tasks":
            if self.subagents is None:
                return "Background tasks are not available here."
            return self.subagents.describe(key)
        if name == "status":
            memory = self.config.memory
            with_memory = scope_for(message, memory.groups, memory.guests).memory
            session = await self.sessions.get(key)
            memory_md = self.memory.memory_md if with_memory else None
            return await chat_status(session, self.counter, self.config.llm, memory_md, self.budget)
        if name in ("approve", "deny"):  # answered here, outside the lock the asking turn holds
            if self.tools.approvals is None:
                return "Nothing here asks for approval (exec is off)."
            return self.tools.approvals.answer(
                name == "approve", command_args(message.text), message
            )
        if name in MEMORY_COMMANDS:
            return await self.memory_commands.answer(name, command_args(message.text), message)
        if name == "jobs":
            if self.jobs_command is None:
                return "Scheduled jobs are not available here."
            return self.jobs_command(command_args(message.text), message)
        if name == "skills":  # a group is offered only the skills marked for groups
            scope = scope_for(message, self.config.memory.groups, self.config.memory.guests)
            return await skills_reply(self.context.skills, scope.name == GROUP)
        # /new waits for a running turn of this chat and for its answers to be sent (a reply
        # that never is, e.g. to a terminal that left, is waited for only so long), then rotates.
        async with self._lock(key):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(UNSENT_WAIT):
                    await self._replies_sent(key)
            archived = await self.sessions.rotate(key)
        if archived is not None and self.keeper is not None:
            self.keeper.after_rotate(key, archived)
        return NEW_SESSION_REPLY
