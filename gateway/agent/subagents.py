"""Background agents: the `spawn` tool, the tasks it starts, and their results delivered once.

`spawn(task, label?)` is offered only in the owner's own chats (their DMs and the terminal): never
to a group or a guest, whatever `memory.groups` or `memory.guests` says, and it checks the asking
chat again when called. It starts a background agent (gateway/agent/subagent_turn.py) as a task of
this module's own task group and returns at once; the chat's turn ends and the chat goes on.

When the background agent is done, its result is stored in the parent chat's session as an owed
answer (in order with that chat's turns, under its lock only for that append) and delivered like
any answer: sent, then marked delivered. So the parent's next turn has it in its history.

Every background agent started and not yet reported is listed in `STATE/subagents.json`, written
before it starts. After a kill, the next start finds it there and tells its chat that it was
interrupted, through the same outbox: a result already stored is sent instead (if not yet marked
delivered), and nothing is stored or sent twice (the stored line carries the task's `run` id).
`/stop` in the parent chat cancels its background agents too; `/tasks` lists them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from gateway.agent.subagent_turn import SESSION_PREFIX, Assignment, SubagentTurn
from gateway.bus import OutboundMessage, typed_command
from gateway.config.subagents import SubagentsConfig
from gateway.errors import LLMError, describe_errors, leaf_errors
from gateway.logs import redact
from gateway.tools.registry import Tool, ToolError, turn_origin
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

NAME = "spawn"
STATE_FILE = "subagents.json"
OWNER_ONLY = "spawn works only in the owner's private chats"
# Seconds a result waits for its chat's channel to connect (just after a start, most likely).
CHANNEL_WAIT = 60.0
LABEL_CHARS = 48
TERMINAL = "terminal"

Deliver = Callable[[OutboundMessage], Awaitable[str | None]]
"""Sends a message to a chat nobody is waiting on; None when delivered, else why it was not."""

ChannelReady = Callable[[str], asyncio.Event | None]
"""A channel's event, set while it is connected; None when no such channel runs here."""


class StoreReply(Protocol):
    """Stores a text in a chat's session as owed, once per `run` (the agent's `job_message`)."""

    async def __call__(
        self, channel: str, chat_id: str, key: str, text: str, job: str, run: str
    ) -> OutboundMessage | None: ...


class Owners(Protocol):
    """Whether a person is an owner by the access settings in force (a reload changes them)."""

    def __call__(self, channel: str, sender_id: str, username: str | None) -> bool: ...


class Prompt(Protocol):
    """A terminal's prompt: it runs until its person leaves, and prints what nobody asked for."""

    async def run(self) -> None: ...

    async def notify(self, message: OutboundMessage) -> str | None: ...


def state_path(state_dir: Path) -> Path:
    """The background agents started and not yet reported to their chats."""
    return state_dir / STATE_FILE


def load_left(state_dir: Path) -> list[Assignment]:
    """The background agents the file lists (a previous process's, at start); a file that cannot
    be read lists none, with one warning (its tasks' chats then hear nothing of them)."""
    path = state_path(state_dir)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        return [Assignment(**entry) for entry in entries["running"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("background tasks file unreadable path=%s error=%s", path, exc)
        return []


def describe_listed(state_dir: Path) -> str:
    """One line for `memgate status`: the background agents running (or, with the service
    stopped, left to be reported as interrupted at its next start)."""
    jobs = load_left(state_dir)
    if not jobs:
        return "subagents:  none running"
    names = ", ".join(f"{job.id} ({job.label}) for {job.parent}" for job in jobs)
    return f"subagents:  {len(jobs)} running or not yet reported: {names}"


def run_id(job: Assignment) -> str:
    """The id its result is stored under in the parent session (found again after a kill)."""
    return f"subagent-{job.id}"


class Subagents:
    """The background agents of one gateway: started by `spawn`, run in `run()`'s task group."""

    def __init__(self, settings: SubagentsConfig, state_dir: Path, turn: SubagentTurn) -> None:
        self.settings = settings
        self.state_dir = state_dir
        self.turn = turn
        self._listed: dict[str, Assignment] = {}  # as the state file holds them
        self._running: dict[str, tuple[Assignment, float, asyncio.Task[None]]] = {}
        self._stopped: set[str] = set()  # cancelled by /stop, not by a shutdown
        self._group: asyncio.TaskGroup | None = None
        self._store: StoreReply | None = None
        self._deliver: Deliver | None = None
        self._ready: ChannelReady | None = None
        self._owners: Owners | None = None
        self._writing = asyncio.Lock()
        self._moved = asyncio.Condition()  # notified when a background agent ends or reports
        self._started = False
        self.finished = 0  # results reported to their chats, for tests and status

    # -- the service's side ------------------------------------------------------------------------
    async def run(
        self,
        store: StoreReply,
        deliver: Deliver,
        ready: ChannelReady,
        owners: Owners | None = None,
    ) -> None:
        """Run background agents until cancelled; first tell the chats of those a previous
        process left running that they were interrupted. Cancelled (a stop), the running ones
        stay listed, and the next start tells their chats the same. A result whose starter
        `owners` no longer lists (a reload took them out) is not given to their chat."""
        if self._started:
            raise RuntimeError("Subagents.run() was already started")
        self._started = True
        self._store, self._deliver, self._ready = store, deliver, ready
        self._owners = owners
        left = await asyncio.to_thread(load_left, self.state_dir)
        self._listed.update((job.id, job) for job in left)
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                for job in left:
                    log.info("background task interrupted by a restart id=%s", job.id)
                    report = self._guarded(job, self._report(job, interrupted(job)))
                    group.create_task(report, name=f"subagent-{job.id}")
                await asyncio.Event().wait()  # ends only by cancellation
        finally:
            self._group = None

    async def run_beside(self, prompt: Prompt, store: StoreReply) -> None:
        """A terminal's prompt (`memgate chat` without the service) with background agents
        beside it, each result printed there as it comes, until the prompt ends; those still
        running then stay listed, and the next start reports them."""

        async def show(reply: OutboundMessage) -> str | None:
            problem = await prompt.notify(reply)
            await reply.sent()
            return problem

        async with asyncio.TaskGroup() as group:
            work = group.create_task(self.run(store, show, lambda _: None), name="subagents")
            try:
                await prompt.run()
            finally:
                work.cancel()

    def running(self, parent: str | None = None) -> list[tuple[Assignment, float]]:
        """The background agents running now (of chat `parent`), each with its start (monotonic)."""
        return [
            (job, started)
            for job, started, _ in self._running.values()
            if parent is None or job.parent == parent
        ]

    async def wait_for(self, check: Callable[[], bool]) -> None:
        """Wait until `check()` holds, looking again each time a background agent ends or
        its result has been reported."""
        async with self._moved:
            await self._moved.wait_for(check)

    async def _notify(self) -> None:
        async with self._moved:
            self._moved.notify_all()

    async def stop(self, parent: str) -> int:
        """Cancel chat `parent`'s background agents (`/stop`) and unlist them; how many there
        were. Unlisted here, not by their tasks: a task cancelled before its first step runs
        none of its code."""
        stopped = [job for job, _, task in self._running.values() if job.parent == parent]
        for job in stopped:
            _, _, task = self._running.pop(job.id)
            self._stopped.add(job.id)
            task.cancel()
            self._listed.pop(job.id, None)
        if stopped:
            log.info("background tasks stopped parent=%s count=%d", parent, len(stopped))
            await self._save()
            await self._notify()
        return len(stopped)

    def withdraw(self, owners: Owners) -> int:
        """Stop and unlist the background agents whose starter `owners` no longer lists (a reload
        took them out of allow_from): they work in the private scope, which is no longer theirs.
        Their chats are not told. How many there were."""
        gone = [
            job
            for job, _, _ in self._running.values()
            if not owners(job.channel, job.sender_id, job.sender_username)
        ]
        for job in gone:
            _, _, task = self._running.pop(job.id)
            self._stopped.add(job.id)
            task.cancel()
            self._listed.pop(job.id, None)
            log.warning(
                "background task stopped id=%s channel=%s user=%s reason=no longer an owner",
                job.id,
                job.channel,
                job.sender_id,
            )
        if gone and self._group is not None:
            self._group.create_task(self._unlisted(), name="subagents-withdrawn")
        return len(gone)

    async def _unlisted(self) -> None:
        await self._save()
        await self._notify()

    def describe(self, parent: str) -> str:
        """`/tasks`: this chat's background agents running now."""
        jobs = self.running(parent)
        if not jobs:
            return "No background tasks are running in this chat."
        now = time.monotonic()
        lines = [f"{job.id} — {job.label} (running {now - started:.0f} s)" for job, started in jobs]
        return "\n".join(["Background tasks:", *lines])

    def tool(self) -> Tool:
        return Tool(
            NAME,
            "Start a background agent on a long task (e.g. reading several pages and summarising "
            "them); it has the file and search tools, and its result comes to this chat when "
            "done. Returns at once; tell the person it started.",
            {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "the whole task, self-contained"},
                    "label": {"type": "string", "description": "a few words naming it"},
                },
                "required": ["task"],
            },
            self._spawn,
        )

    # -- the tool ----------------------------------------------------------------------------------
    async def _spawn(self, arguments: dict[str, Any]) -> str:
        origin = turn_origin.get()
        if origin is None or origin.is_group or not origin.sender_is_owner:
            raise ToolError(OWNER_ONLY)
        if origin.key.startswith(SESSION_PREFIX):
            raise ToolError("a background task cannot start another")
        if self._group is None:
            raise ToolError(
                "background tasks run only under memgate run or an interactive memgate chat, "
                "not a one-shot chat -m"
            )
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ToolError("task must be a non-empty string")
        label = arguments.get("label")
        if not isinstance(label, str) or not label.strip():
            label = task
        label = " ".join(label.split())
        if len(label) > LABEL_CHARS:
            label = label[: LABEL_CHARS - 1] + "…"
        # The model passes these on: the commands as the person types them there.
        stop = typed_command(origin.channel, "/stop")
        tasks = typed_command(origin.channel, "/tasks")
        if len(self._running) >= self.settings.max_running:
            raise ToolError(
                f"not started: {len(self._running)} background tasks are running, the most "
                f"agent.subagents.max_running allows; wait for one to finish or {stop} them"
            )
        job = Assignment(
            id=uuid.uuid4().hex[:8],
            label=label,
            task=task.strip(),
            parent=origin.key,
            channel=origin.channel,
            chat_id=origin.chat_id,
            sender_id=origin.sender_id,
            sender_username=origin.sender_username,
        )
        self._listed[job.id] = job
        await self._save()  # listed before it starts: a kill from now on is reported
        work = self._group.create_task(
            self._guarded(job, self._work(job)), name=f"subagent-{job.id}"
        )
        self._running[job.id] = (job, time.monotonic(), work)
        log.info("background task started id=%s parent=%s", job.id, job.parent)
        return (
            f"Started background task {job.id} ({label}). Its result will come to this chat when "
            f"it is done; {tasks} lists it and {stop} stops it."
        )

    # -- one background agent ----------------------------------------------------------------------
    async def _guarded(self, job: Assignment, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception:
            # This task's own: a failure to store or send one result (a full disk, a bug) must
            # not end the task group and every other background agent with it. It stays listed,
            # so the next start reports it.
            log.exception("background task could not report id=%s", job.id)

    async def _work(self, job: Assignment) -> None:
        try:
            result = await self._outcome(job)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if job.id not in self._stopped or task is None:
                raise  # a stop: it stays listed, and the next start says it was interrupted
            task.uncancel()  # /stop's cancellation, answered (and unlisted) by /stop itself
            return
        finally:
            self._running.pop(job.id, None)
            self._stopped.discard(job.id)
            await self._notify()
        await self._report(job, result)

    async def _outcome(self, job: Assignment) -> str:
        head = f"Background task {job.id} ({job.label})"
        try:
            async with asyncio.timeout(self.settings.timeout):
                answer = await self.turn.run(job, self.settings.max_turns)
        except TimeoutError:
            log.warning("background task timed out id=%s", job.id)
            return (
                f"{head} stopped after {self.settings.timeout:g} s "
                "(agent.subagents.timeout) without finishing."
            )
        except Exception as exc:
            # The one boundary of a background agent, as `handle` is a turn's: its failure is
            # news for its chat, and must not end the task group of every other one.
            return f"{head} failed: {failure(job, exc)}."
        log.info("background task finished id=%s", job.id)
        return f"{head} is done:\n\n{answer}"

    async def _report(self, job: Assignment, text: str) -> None:
        """Store `text` in the parent session as owed (or find what was stored for this task
        before a kill), deliver it, and forget the task once its chat has it."""
        assert self._store is not None and self._deliver is not None and self._ready is not None
        owners = self._owners
        if owners is not None and not owners(job.channel, job.sender_id, job.sender_username):
            # Its words came from the private scope (MEMORY.md, the owner's files): not for
            # someone who is no longer an owner, nor stored in their chat's history.
            log.warning(
                "background task result withheld id=%s channel=%s user=%s reason=no longer an owner",
                job.id,
                job.channel,
                job.sender_id,
            )
            await self._forget(job)
            self.finished += 1
            await self._notify()
            return
        job_tag = f"{SESSION_PREFIX}{job.id}"
        reply = await self._store(job.channel, job.chat_id, job.parent, text, job_tag, run_id(job))
        if reply is not None:
            connected = self._ready(job.channel)
            if connected is not None and not connected.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CHANNEL_WAIT):
                        await connected.wait()
            problem = await self._deliver(reply)
            # A terminal that is not there (the service's side of an attached `memgate chat`)
            # keeps it owed: `memgate chat` prints what its session owes when it starts.
            if problem is not None and job.channel != TERMINAL:
                log.warning("background task result not delivered id=%s reason=%s; "
                            "kept for the next start", job.id, problem)  # fmt: skip
                return
        self.finished += 1
        await self._forget(job)
        await self._notify()

    async def _forget(self, job: Assignment) -> None:
        self._listed.pop(job.id, None)
        await self._save()

    async def _save(self) -> None:
        # One write at a time, each of the list as it is when its turn comes: a slower write
        # in a worker thread never lands over a newer one.
        async with self._writing:
            entries = [asdict(job) for job in self._listed.values()]
            data = json.dumps({"running": entries}, ensure_ascii=False, indent=1) + "\n"
            await asyncio.to_thread(atomic_write, state_path(self.state_dir), data)


def interrupted(job: Assignment) -> str:
    return (
        f"Background task {job.id} ({job.label}) was interrupted by a restart and did not "
        "finish. Ask again to run it anew."
    )


def stop_reply(turn: bool, tasks: int) -> str:
    """What `/stop` answers: the turn it stopped, and the background tasks."""
    if not tasks:
        return "Stopped." if turn else "Nothing to stop."
    stopped = f"{tasks} background task{'s' if tasks > 1 else ''}"
    return f"Stopped, and {stopped}." if turn else f"Stopped {stopped}."


def failure(job: Assignment, error: BaseException) -> str:
    """Log a background agent's failure in one line; the cause, in short, for its chat."""
    log.debug("background task failure traceback id=%s", job.id, exc_info=error)
    llm = next((leaf for leaf in leaf_errors(error) if isinstance(leaf, LLMError)), None)
    cause = llm.cause if llm is not None else redact(describe_errors(error), ())
    log.error("background task failed id=%s error=%s", job.id, cause)
    return cause
