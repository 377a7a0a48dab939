"""The agent loop: one turn per inbound message, shared by every channel.

Turns of one session run in order; sessions run concurrently up to `agent.max_concurrency`. The user
message is stored before the model is called, so nothing the person said is lost. A tool call is
stored before the tool runs and each result as soon as it is in, so a message a channel replays after
a crash resumes from the stored steps without running a tool twice; the answer is stored as owed
(gateway/agent/outbox.py) and one not marked delivered is sent again. `handle()` is the one per-message
error boundary: it logs one line (the traceback at DEBUG) and answers with a short apology naming
the cause; it raises nothing but cancellation, so channels handle only transport errors.
Given a `ReplyStream` (a channel with streaming on), the model is asked for a stream and the answer
shows as it is written (gateway/agent/model_call.py); what is stored is still exactly the whole
answer, or on /stop the part written so far with a "(stopped)" mark. A command (`/new`, `/stop`,
...) is not a turn: gateway/agent/commands/answers.py answers it. Answers out with a channel are
counted until it reports them sent (gateway/agent/unsent.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from gateway.agent.apology import apology
from gateway.agent.commands.answers import AgentCommands
from gateway.agent.context import ContextBuilder
from gateway.agent.context_fit import ContextFitter
from gateway.agent.model_call import ask_model
from gateway.agent.outbox import Outbox
from gateway.agent.replay import ReplayAction, find_replay
from gateway.agent.session_lock import SessionLock
from gateway.agent.subagents import Subagents
from gateway.agent.tool_steps import close_interrupted, run_tool_step
from gateway.agent.turn_notes import tool_note
from gateway.agent.unsent import UnsentReplies
from gateway.agent.watchers import Activity, MemoryKeeper, TurnObserver, TurnStats
from gateway.bus import InboundMessage, OutboundMessage, ReplyStream, typed_command
from gateway.config.models import Config
from gateway.llm.types import ChatProvider, ChatResponse
from gateway.media.reader import MediaReader, PreparedMessage
from gateway.tools.files import MemorySeen, turn_memory
from gateway.tools.registry import ToolRegistry, turn_origin, turn_stream
from gateway.tools.scope import scope_for
from gateway.tools.toolbox import ToolBox
from memory.budget import PromptBudget
from memory.errors import BudgetError
from memory.files import MemoryFiles
from memory.sessions.file import Message
from memory.sessions.store import Session, SessionStore, legal_messages
from memory.tokens import TokenCounter

log = logging.getLogger(__name__)

# Unconsolidated messages whose byte bound a turn adds up on the event loop (a fraction of a
# millisecond); a longer backlog is sized in a worker thread, so no turn waits on its length.
INLINE_HISTORY = 256


class AgentLoop:
    """Turns inbound messages into replies through the model and the tools."""

    def __init__(
        self,
        *,
        config: Config,
        provider: ChatProvider,
        sessions: SessionStore,
        memory: MemoryFiles,
        counter: TokenCounter,
        tools: ToolBox,
        context: ContextBuilder,
        keeper: MemoryKeeper | None = None,
        observer: TurnObserver | None = None,
        budget: PromptBudget | None = None,
        media: MediaReader | None = None,
        jobs_command: Callable[[str, InboundMessage], str] | None = None,
    ) -> None:
        self.config = config
        self.provider = provider
        self.sessions = sessions
        self.memory = memory
        self.counter = counter
        # Each turn gets the tools of its scope (gateway/tools/scope.py), chosen from the session.
        self.tools = tools
        self.context = context
        self.keeper = keeper
        self.observer = observer
        self.budget = budget or PromptBudget(config.llm.budget, counter)
        # Learns the server's token counts; its tokenizer call waits at the provider's gate.
        self.fitter = ContextFitter(self.budget, config.llm, getattr(provider, "gate", None))
        self.media = media  # None: attachments stay the channels' notes (no transcripts, no images)
        self.outbox = Outbox(sessions)
        # Answers to replayable messages (with a message id) out with a channel: /new waits.
        self._unsent = UnsentReplies()
        self._slots = asyncio.Semaphore(config.agent.max_concurrency)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._running: dict[str, asyncio.Task[str | None]] = {}
        self._stopped: set[asyncio.Task[str | None]] = set()  # turns /stop cancelled
        self.commands = AgentCommands(
            config=config,
            sessions=sessions,
            memory=memory,
            counter=counter,
            budget=self.budget,
            tools=tools,
            context=context,
            keeper=keeper,
            lock=self._session_lock,
            stop_turn=self._stop_turn,
            replies_sent=self._unsent.wait_sent,
            jobs_command=jobs_command,
        )
        self.activity = Activity()  # memgate run starts MCP servers once it is quiet

    @property
    def subagents(self) -> Subagents | None:
        """Background agents (`spawn`), where they run; `/stop` and `/tasks` reach them."""
        return self.commands.subagents

    @subagents.setter
    def subagents(self, subagents: Subagents | None) -> None:
        self.commands.subagents = subagents

    # -- entry point -------------------------------------------------------------------------------
    async def handle(
        self, message: InboundMessage, stream: ReplyStream | None = None
    ) -> OutboundMessage | None:
        """Answer one inbound message: the one per-message error boundary.

        Never raises except `asyncio.CancelledError`: any other failure, however deep (the model,
        the tools' bookkeeping, the session files), becomes one log line (its traceback at DEBUG)
        and a short apology naming the cause, marked `failed`. With a `stream`, the answer is
        written to it as the model produces it; the reply returned is the whole of it.
        """
        with self.activity.answering():
            return await self._answer(message, stream)

    async def _answer(
        self, message: InboundMessage, stream: ReplyStream | None
    ) -> OutboundMessage | None:
        started = time.monotonic()
        stats = TurnStats()
        if self.observer is not None:
            self.observer.message_in(message.channel)
        try:
            text = await self._dispatch(message, stats, stream)
            reply = self._reply(message, text, stats) if text else None
            if reply is not None and (choice := self.commands.buttons(message)):
                reply = replace(reply, buttons=choice)  # /forget's listing: Forget or Keep
        except Exception as exc:
            reply = self._reply(message, apology(message, exc, self.config.llm.model), None)
        log.info(
            "handled session=%s latency_ms=%d llm_calls=%d prompt_tokens=%d completion_tokens=%d",
            message.key,
            (time.monotonic() - started) * 1000,
            stats.calls,
            stats.prompt_tokens,
            stats.completion_tokens,
        )
        if reply is not None and self.observer is not None:
            self.observer.message_out(message.channel, error=reply.failed)
        return reply

    def _reply(
        self, message: InboundMessage, text: str, stats: TurnStats | None
    ) -> OutboundMessage:
        """The reply to `message`; `stats` None for an apology, which is never stored as owed."""
        # In a group, answer as a reply so it is clear whom it is for; in a DM that is noise.
        reply_to = message.message_id if message.is_group else None
        reply = OutboundMessage(
            message.channel, message.chat_id, text, reply_to=reply_to, failed=stats is None
        )
        if stats is not None and stats.session is not None and stats.answer is not None:
            reply = self.outbox.reply(stats.session, stats.answer, reply)
            if message.message_id:  # a channel that replays by message id after a crash
                reply = self._unsent.track(reply, message.key)
        return reply

    async def owed(self, channel: str, chat_id: str, key: str) -> list[OutboundMessage]:
        """The answers of session `key` still owed, oldest first, each marking itself delivered
        once its channel reports it sent: for a channel without an inbox to replay (the terminal),
        to send before it takes a new message."""
        session = await self.sessions.get(key)
        return [
            self._unsent.track(
                self.outbox.reply(
                    session, stored, OutboundMessage(channel, chat_id, str(stored["content"]))
                ),
                key,
            )
            for stored in self.outbox.owed(session)
        ]

    async def _dispatch(
        self, message: InboundMessage, stats: TurnStats, stream: ReplyStream | None = None
    ) -> str | None:
        answer = await self.commands.answer(message)
        if answer is not None:
            return answer
        if not message.text.strip() and not message.media:
            return None
        async with self._session_lock(message.key), self._slots:
            # The turn runs as a child task so /stop can cancel it without cancelling the
            # channel's task that is waiting here for the reply.
            # A failure comes out wrapped in an ExceptionGroup, which `handle` takes apart.
            try:
                async with asyncio.TaskGroup() as group:
                    turn = group.create_task(self._turn(message, stats, stream))
                    self._running[message.key] = turn
            finally:
                finished = self._running.pop(message.key, None)
                if finished is not None:
                    self._stopped.discard(finished)
            return None if turn.cancelled() else turn.result()

    # -- what the commands need of the turns -------------------------------------------------------
    def _stop_turn(self, key: str) -> bool:
        """/stop: cancel session `key`'s running turn; False if none is running."""
        turn = self._running.get(key)
        if turn is None or turn.done():
            return False
        self._stopped.add(turn)  # a streamed answer keeps what it showed (see model_call)
        turn.cancel()
        return True

    async def job_message(
        self, channel: str, chat_id: str, key: str, text: str, job: str, run: str
    ) -> OutboundMessage | None:
        """Job `job`'s message for its run `run`, stored in order with the turns and owed to
        its chat. Asked again for the same run (after a kill), it returns the line stored then,
        or None once that line was delivered: a reminder is stored once and sent once."""
        async with self._session_lock(key):
            session = await self.sessions.get(key)
            return await self.outbox.once(
                session, OutboundMessage(channel, chat_id, text), job, run
            )

    # -- one turn ----------------------------------------------------------------------------------
    async def _turn(
        self, message: InboundMessage, stats: TurnStats, stream: ReplyStream | None = None
    ) -> str | None:
        turn_origin.set(message)  # this task's own context: the tools learn which chat asks
        turn_stream.set(stream)
        session = await self.sessions.get(message.key)
        replay = find_replay(session, message.message_id) if message.message_id else None
        stored = replay.index if replay is not None else None
        steps: list[Message] = []
        if replay is not None:
            # A channel replaying its inbox after a crash: carry on where the turn stopped.
            log.info("%s session=%s", replay.action.value, message.key)
            if replay.action in (ReplayAction.ANSWERED, ReplayAction.LEFT_BEHIND):
                return None
            if replay.action is ReplayAction.RESEND and replay.answer is not None:
                if self.observer is not None:
                    self.observer.reply_resent()
                stats.session, stats.answer = session, replay.answer
                return str(replay.answer.get("content") or "")
            if replay.action is ReplayAction.RESUME:
                if self.observer is not None:
                    self.observer.turn_resumed()
                steps = await close_interrupted(self.sessions, session, replay.steps)
        prepared = (
            await self.media.prepare(message) if self.media else PreparedMessage(message.text)
        )
        if stored is None:
            # The session keeps the text (transcripts, document text, file paths), never pixels.
            user: dict[str, Any] = {"role": "user", "content": prepared.text}
            if message.sender_id:
                user["sender"] = message.sender_id
            if message.sender_name:
                user["sender_name"] = message.sender_name
            if message.message_id:
                user["message_id"] = message.message_id
            trusted = message.sender_is_owner or self.config.memory.guests == "shared"
            if message.is_group or not trusted:
                session.group = True  # a group's or a guest's words stay out of MEMORY.md
            # Written before the model is asked (a killed process keeps it); the disk's sync
            # runs beside the model call, and the answer's append waits for it.
            await self.sessions.add_messages(session, [user], synced=False)
        if not prepared.answerable:
            # Only files we could not read (a failed transcription): nothing to ask the model.
            return "\n".join(prepared.notices)

        scope = scope_for(message, self.config.memory.groups, self.config.memory.guests)
        tools = self.tools.for_scope(scope)
        schemas = tools.schemas()
        system = await self.context.system_prompt(scope, schemas)
        # The MEMORY.md this turn saw in its prompt: what a write_file of it is compared with.
        turn_memory.set(MemorySeen(self.context.memory_shown(scope)))
        current = _current_message(
            self.context.user_content(replace(message, text=prepared.text)), prepared.images
        )
        end = len(session.messages) - 1 if stored is None else stored
        head = [{"role": "system", "content": system}, current]
        most = self.config.memory.max_history_messages
        # Most turns fit by bytes, decided here at once; the others count, in a worker thread
        # (the first such count builds the tokenizer's vocabulary), as does a long backlog.
        history = None
        if end - session.last_consolidated <= INLINE_HISTORY:
            history = self.budget.history_by_bound(
                session, head, schemas, end=end, max_messages=most
            )
        if history is None:
            try:
                history = await asyncio.to_thread(
                    partial(self.budget.history, end=end, max_messages=most),
                    session,
                    head,
                    schemas,
                )
            except BudgetError as exc:
                return (
                    f"Your message is too long for the model ({exc.needed} tokens with my "
                    f"instructions; the limit is {exc.limit}). It is kept; please send a "
                    "shorter one."
                )
        messages: list[dict[str, Any]] = [head[0], *history, current]
        at = len(messages) - 1
        # Stored tool steps of a resumed turn: their results are in, so no tool runs again.
        messages.extend(legal_messages([{"role": "user", "content": ""}, *steps])[1:])
        # The history was chosen to fit beside everything else, so the first request needs no
        # second check, unless a resumed turn's steps came after it.
        sized = len(messages) == at + 1
        try:
            reply = await self._tool_loop(session, messages, tools, stats, at, stream, sized=sized)
            return "\n\n".join([*prepared.notices, reply]) if reply else reply
        finally:
            if self.keeper is not None:
                self.keeper.after_turn(session, system, schemas)

    async def _tool_loop(
        self,
        session: Session,
        messages: list[dict[str, Any]],
        tools: ToolRegistry,
        stats: TurnStats,
        current: int,  # index in `messages` of the message this turn answers
        stream: ReplyStream | None = None,
        *,
        sized: bool = False,  # the first request is known to fit the budget
    ) -> str | None:
        schemas = tools.schemas()
        for _ in range(self.config.agent.max_iterations):
            try:
                # Every later call of the turn is checked: tool results grow the request.
                request = (
                    messages
                    if sized
                    else await asyncio.to_thread(
                        self.budget.fit, messages, schemas, current=current
                    )
                )
                sized = False
                called = time.monotonic()
                answer = await self.fitter.call(
                    request,
                    schemas,
                    partial(self._send, session, schemas, stream, stats),
                    partial(self.budget.fit, messages, schemas, current=current),
                )
            except BudgetError as exc:
                log.warning("turn stopped over budget session=%s error=%s", session.key, exc)
                return (
                    f"I had to stop: the next step would need {exc.needed} tokens and the model "
                    f"takes {exc.limit}. Ask for less at once, or send "
                    f"{typed_command(session.key.split(':', 1)[0], '/new')} to start afresh."
                )
            if isinstance(answer, str):
                return answer  # stopped: the part written so far, stored with its mark
            response = answer
            if self.observer is not None:
                self.observer.llm_call(
                    time.monotonic() - called, response.prompt_tokens, response.completion_tokens
                )
            stats.calls += 1
            stats.prompt_tokens += response.prompt_tokens
            stats.completion_tokens += response.completion_tokens
            if not response.tool_calls:
                content = (response.content or "").strip()
                if content:
                    # Stored as owed: a kill before the platform takes it sends it at restart.
                    stats.session = session
                    stats.answer = await self.outbox.owe(session, content)
                return content or "(The model returned an empty answer.)"
            if stream is not None:
                await stream.status(tool_note((c.name, c.arguments) for c in response.tool_calls))
            messages.extend(await run_tool_step(self.sessions, session, response, tools))
            # A tool may have written MEMORY.md or a bootstrap file: the next turn's prompt
            # shows it at once rather than after the context's recheck interval.
            self.context.files_changed()
        return (
            f"I stopped after {self.config.agent.max_iterations} tool steps without a final answer. "
            "Ask me to continue, or rephrase the request."
        )

    async def _send(
        self,
        session: Session,
        schemas: list[dict[str, Any]],
        stream: ReplyStream | None,
        stats: TurnStats,
        request: list[dict[str, Any]],
    ) -> ChatResponse | str:
        answer = await ask_model(self.provider, request, schemas, stream, self._stopped)
        if isinstance(answer, str):  # /stop cut a streamed answer: what it showed is owed
            stats.session, stats.answer = session, await self.outbox.owe(session, answer)
        return answer

    def _session_lock(self, key: str) -> SessionLock:
        return SessionLock(self._locks, key)


def _current_message(text: str, images: tuple[str, ...]) -> dict[str, Any]:
    """The user message this turn answers; with images, OpenAI's content parts (this turn only)."""
    if not images:
        return {"role": "user", "content": text}
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in images]
    return {"role": "user", "content": parts}
