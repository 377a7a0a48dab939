"""Background consolidation: old messages become HISTORY.md entries and MEMORY.md facts.

`Consolidator` decides what is queued and runs one job: which messages are due and in which
chunks (memory/consolidation/chunking.py), the model call (memory/consolidation/summariser.py) and the writes
(memory/consolidation/entries.py). The reply path only calls `after_turn()` / `after_rotate()`, which enqueue on
a `WorkQueue` (memory/consolidation/work_queue.py) served by `memory.workers` workers, so a session has at most
one job queued or running. Any failure counts against its session, which then backs off
(memory/consolidation/failures.py); an oversized MEMORY.md is compacted first (memory/consolidation/compact.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from pathlib import Path
from typing import Any

from memory.budget import PromptBudget
from memory.consolidation import chunking
from memory.consolidation.compact import MemoryCompactor
from memory.consolidation.dedupe import UpdateCurator
from memory.consolidation.entries import ChunkWriter, Transcript, entry_id
from memory.consolidation.failures import FailureLog
from memory.consolidation.recall import RecallMask
from memory.consolidation.summariser import Summariser, SummaryModel
from memory.consolidation.work_queue import WorkQueue
from memory.errors import BudgetError, MemoryChangedError, ModelCallError
from memory.files import MemoryFiles
from memory.sessions.store import Session, SessionStore
from memory.tokens import TokenCounter

log = logging.getLogger(__name__)

MAX_CHUNKS_PER_RUN = 5
MAX_FAILURES = 3
# Tokens kept free in a consolidation prompt: a chunk's lines are counted one by one, and joined
# text can tokenize a little differently.
_CHUNK_MARGIN = 64
_MIN_CHUNK = 512  # a MEMORY.md so large that little room is left still gets a workable chunk


@dataclass(frozen=True)
class ConsolidationSettings:
    """The `memory.*` settings consolidation runs by; `budget` is the model's prompt budget."""

    budget: int
    consolidate_at: float = 0.75
    consolidate_to: float = 0.5
    window: int = 100
    workers: int = 2
    shared_groups: bool = False
    timeout: float = 120.0
    retry_delay: float = 2.0
    max_retry_delay: float = 600.0  # the backoff after repeated failures stops growing here
    archive_on_new: bool = True

    @property
    def trigger(self) -> chunking.Trigger:
        return chunking.Trigger(self.budget, self.consolidate_at, self.consolidate_to, self.window)


@dataclass
class Job:
    """One unit of queued work; `ident` dedupes (a key, or an archived file's path)."""

    ident: str
    key: str
    archived: Path | None = None
    system: str = ""  # the system prompt of the session's last turn, for the size rule
    # Its tool schemas, which every request carries too: the scope's own list, only read.
    tools: list[dict[str, Any]] = field(default_factory=list)
    everything: bool = False  # consolidate all of it (archives, the CLI), not just what is due
    # The session's pointer when the job first ran: progress counts from it over every run.
    origin: int | None = None


@dataclass
class Outcome:
    chunks: int = 0
    messages: int = 0
    failed: bool = False


async def _nothing() -> None:
    return None


class Consolidator:
    """Owns the consolidation queue and its workers; `run()` serves until cancelled."""

    def __init__(
        self,
        sessions: SessionStore,
        files: MemoryFiles,
        counter: TokenCounter,
        model: SummaryModel,
        settings: ConsolidationSettings,
        tz: tzinfo,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        budget: PromptBudget | None = None,
        compactor: MemoryCompactor | None = None,
        failure_report: Path | None = None,
        curator: UpdateCurator | None = None,
    ) -> None:
        self.sessions = sessions
        self.files = files
        self.counter = counter
        # Until the token ratio the replies are teaching is learnt (the runtime sets it).
        self.learnt: Callable[[], Awaitable[None]] = _nothing
        self.settings = settings
        self.budget = budget or PromptBudget(settings.budget, counter)
        # What a memory_update may bring in: no repeats, no forgotten lines (dedupe.py).
        self.curator = curator or UpdateCurator()
        forgotten = self.curator.forgotten_lines
        self.summariser = Summariser(model, self.budget, settings.timeout, forgotten)
        self.transcript = Transcript(tz)
        self.writer = ChunkWriter(sessions, files, self.summariser, self.transcript, self.curator)
        self.compactor = compactor
        self._compacting = asyncio.Lock()
        self.failures = FailureLog(failure_report)
        # How backoff tells and waits out time; a test may pass its own to see the delays.
        self.clock = clock
        self.sleep = sleep
        self.runs = 0
        # Chunks written raw since start, by session: the CLI reports them as not consolidated.
        self.ended_raw: dict[str, int] = {}
        # Called with (key, done, total) as a job starts and after each chunk: messages of the
        # job consolidated so far, of the messages it consolidates (the CLI draws a bar).
        self.progress: Callable[[str, int, int], None] | None = None
        self._queue: WorkQueue[Job] = WorkQueue("consolidator", self.process, self._retry_in)
        self._recovered = asyncio.Event()  # recover() has looked at every archive

    # -- what the reply path calls: enqueue only -----------------------------------------------------
    def after_turn(self, session: Session, system: str, tools: list[dict[str, Any]]) -> None:
        if self.backing_off(session.key):
            return  # a failing write path is not paid for on every turn
        if not self._may_be_due(session, system, tools) and not self._may_compact(session):
            return  # the job would find nothing to do: most turns queue none
        self.enqueue(Job(session.key, session.key, system=system, tools=tools))

    def _may_be_due(self, session: Session, system: str, tools: list[dict[str, Any]]) -> bool:
        """Whether `_target` may find messages due: by the window rule, or by the size rule on
        upper bounds (kept per message by the session), under which exact counts are too."""
        trigger = self._trigger()
        if len(session.messages) - session.last_consolidated >= trigger.window:
            return True
        history, around = self._bounds(session, len(session.messages), system, tools)
        return trigger.may_fire(around + sum(history))

    def _trigger(self) -> chunking.Trigger:
        # The size rule in counted tokens, as the budget has them now: a server whose tokenizer
        # needs more tokens (memory/calibration.py) makes the same history due sooner.
        return replace(self.settings.trigger, budget=self.budget.limit)

    def _bounds(
        self, session: Session, count: int, system: str, tools: list[dict[str, Any]]
    ) -> tuple[list[int], int]:
        """Upper bounds of the size rule's figures: each unconsolidated message of the first
        `count`, and the prompt around them (the system prompt and the tool schemas)."""
        start = session.last_consolidated
        history = [session.bound(i, self.counter) for i in range(start, count)]
        return history, self.budget.at_most(_head(system), tools)

    def _may_compact(self, session: Session) -> bool:
        return (
            self.compactor is not None
            and self._with_memory(session)
            and self.compactor.may_be_oversized()
        )

    def backing_off(self, key: str) -> bool:
        """True while `key` waits out the backoff after a failed consolidation."""
        return self.failures.backing_off(key, self.clock())

    @property
    def sessions_backing_off(self) -> int:
        return self.failures.waiting(self.clock())

    @property
    def failures_total(self) -> int:
        return self.failures.total

    def failures_of(self, key: str) -> int:
        """Consolidation failures of `key` since its last success."""
        return self.failures.count(key)

    def after_rotate(self, key: str, archived: Path) -> None:
        if self.settings.archive_on_new:
            self.enqueue(Job(str(archived), key, archived=archived, everything=True))

    def enqueue(self, job: Job) -> bool:
        """Queue `job` unless the same session already has one queued or running."""
        return self._queue.put(job)

    @property
    def queue_depth(self) -> int:
        return self._queue.depth

    @property
    def jobs_queued(self) -> int:
        """Jobs queued since start (a turn queues one only when it may have work for it)."""
        return self._queue.queued

    async def recover(self) -> int:
        """Queue archival left unfinished by a previous process (derived from the files).

        The runtime runs it beside the first replies, not before them; `wait_idle` waits for it.
        """
        count = 0
        try:
            if not self.settings.archive_on_new:
                return 0
            for path in self.sessions.archived_paths():
                try:
                    if not await self.sessions.archive_pending(path):
                        continue
                    session = await self.sessions.open_archived(path)
                except OSError as exc:  # gone or unreadable: the next start looks again
                    log.warning("archive not read file=%s error=%s", path, exc)
                    continue
                if session.unconsolidated:
                    job = Job(str(path), session.key, archived=path, everything=True)
                    count += self.enqueue(job)
            if count:
                log.info("resuming archival consolidation sessions=%d", count)
            return count
        finally:
            self._recovered.set()

    # -- workers -------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the queue with `memory.workers` workers until cancelled."""
        await self._queue.run(self.settings.workers)

    async def wait_idle(self) -> None:
        """Wait until `recover` has queued what it found and nothing is queued or running (tests,
        the CLI)."""
        await self._recovered.wait()
        await self._queue.wait_idle()

    async def drain(self, grace: float) -> bool:
        """Start no new job and give running ones `grace` seconds; True if they all finished."""
        return await self._queue.drain(grace)

    def _retry_in(self, job: Job) -> float | None:
        """An archive's job is queued again when its backoff ends: no new turn will ever bring
        it back (a live session's next turn does, once its backoff is over)."""
        if job.archived is None or not self.backing_off(job.key):
            return None
        return self.failures.retry_at(job.key) - self.clock()

    # -- one job ---------------------------------------------------------------------------------------
    async def process(self, job: Job) -> bool:
        """Consolidate up to MAX_CHUNKS_PER_RUN chunks; True if more remains to do right away."""
        # What the chat's last answers taught about the server's tokens is learnt first, so that
        # the chunks are cut for the ratio their calls will be checked against.
        await self.learnt()
        if job.archived is not None:
            session = await self.sessions.open_archived(job.archived)
        else:
            session = await self.sessions.get(job.key)
        if not await self._compact(session):
            return False
        async with session.consolidating:
            end = await asyncio.to_thread(self._target, session, job)
            if end is None:
                return False
            chunks, cap = await asyncio.to_thread(self._chunks, session, end, not job.everything)
            end = max(end, chunks[-1][1]) if chunks else end  # the last chunk may take more
            if job.origin is None:  # its first run: the bar appears before the first call
                job.origin = session.last_consolidated
                self._report(session.key, job.origin, job.origin, end)
            outcome = Outcome()
            for start, stop in chunks[:MAX_CHUNKS_PER_RUN]:
                if not await self._consolidate_chunk(session, start, stop, cap):
                    outcome.failed = True
                    break
                outcome.chunks += 1
                outcome.messages += stop - start
                self._report(session.key, job.origin, stop, end)
            self.runs += 1
            log.info(
                "consolidated session=%s chunks=%d messages=%d pointer=%d failed=%s",
                session.key,
                outcome.chunks,
                outcome.messages,
                session.last_consolidated,
                outcome.failed,
            )
            return not outcome.failed and len(chunks) > MAX_CHUNKS_PER_RUN and job.everything

    def _report(self, key: str, origin: int, reached: int, end: int) -> None:
        if self.progress is not None:
            self.progress(key, reached - origin, end - origin)

    def _with_memory(self, session: Session) -> bool:
        return not session.group or self.settings.shared_groups

    def _target(self, session: Session, job: Job) -> int | None:
        # A worker thread runs this while the event loop may append the chat's next turns: every
        # figure is of the messages there were when it began (`count`), the sizes as the list.
        start, count = session.last_consolidated, len(session.messages)
        trigger = self._trigger()
        # Sizes matter only to the size rule, which `everything` does not ask. Upper bounds
        # (no tokenizer) go in where even they stay under it: the decision is the same.
        tokens: list[int] = []
        system_tokens = 0
        if not job.everything:
            tokens, system_tokens = self._bounds(session, count, job.system, job.tools)
            if trigger.may_fire(system_tokens + sum(tokens)):
                tokens = [session.tokens(i, self.counter) for i in range(start, count)]
                system_tokens = self.budget.size(_head(job.system), job.tools)
        return chunking.target(
            session.messages.upto(count),
            start,
            tokens,
            trigger,
            system_tokens=system_tokens,
            everything=job.everything,
            archive=job.archived is not None,
        )

    def _chunks(self, session: Session, end: int, fill: bool) -> tuple[list[tuple[int, int]], int]:
        """Chunks measured as the request will be: the same budget and token counter, the
        prompt around the lines, and each message as the line the model will read; and the
        bytes a line may take (the room of a whole chunk: one message longer than that is cut
        in the prompt, or its chunk could never be asked and would end raw).

        With `fill`, the last chunk also takes the turns after `end` that its call has room
        for, short of the newest few (chunking.KEEP_TURNS): fewer calls for the same lines.
        """
        with_memory = self._with_memory(session)
        # As in `_target`: the turns the event loop stores meanwhile are not this job's.
        messages = session.messages.upto(len(session.messages))
        memory_text = self.files.read_memory() if with_memory else ""
        start = session.last_consolidated
        most = MAX_CHUNKS_PER_RUN + 1  # one more than a run takes tells that more remains
        reach = chunking.keep_from(messages, start) if fill else None

        # Byte bounds first: when the prompt and every line a run may take fit by bytes, one
        # call takes them all, as it would by tokens (each check is a sum below the total).
        fixed = self.summariser.fixed_size(memory_text, with_memory, at_most=True)
        limit = max(_MIN_CHUNK, self.budget.limit - fixed - _CHUNK_MARGIN)
        cap = limit - 1  # bytes bound tokens: a line this long fits a chunk's room by either

        mask = RecallMask(messages[start : max(end, reach or 0)])  # as commit shows them

        @functools.cache
        def line(index: int) -> str:
            return self.transcript.line(mask.apply(messages[index]), cap=cap)

        def bound(index: int) -> int:  # the line plus the newline that joins it to the next
            return self.counter.at_most(line(index)) + 1

        total = 0
        for index in range(start, max(end, reach or 0)):
            total += bound(index)
            if total > limit:
                break
        else:
            return chunking.split(messages, start, end, bound, limit, most, reach), cap
        fixed = self.summariser.fixed_size(memory_text, with_memory)
        limit = max(_MIN_CHUNK, self.budget.limit - fixed - _CHUNK_MARGIN)

        def cost(index: int) -> int:
            return self.counter.count(line(index)) + 1

        return chunking.split(messages, start, end, cost, limit, most, reach), cap

    async def _consolidate_chunk(
        self, session: Session, start: int, stop: int, line_cap: int | None = None
    ) -> bool:
        """Consolidate one chunk, retrying with backoff; False if it must wait for a later job.

        Any failure on the way (the model call, HISTORY.md, MEMORY.md, the session marker) counts
        against this session and grows its backoff. After MAX_FAILURES attempts the chunk goes to
        HISTORY.md raw, which is recorded (`ended_raw`, and the report status reads); if even that
        fails, the session backs off (no job is queued for it until
        then) and the next job starts over, model call first, from the same pointer.
        """
        chunk = session.messages[start:stop]
        ident = entry_id(session, start, stop)
        attempts = 0  # of this job; the session's count (for the backoff) may be higher
        while True:
            raw = attempts >= MAX_FAILURES
            attempts += 1
            try:
                if raw:
                    await self.writer.write_raw(session, chunk, stop, ident)
                    log.error(
                        "consolidation failed %d times; chunk archived raw session=%s messages=%d",
                        self.failures.count(session.key),
                        session.key,
                        len(chunk),
                    )
                else:
                    with_memory = self._with_memory(session)
                    await self.writer.commit(session, chunk, stop, ident, with_memory, line_cap)
            except (ModelCallError, MemoryChangedError, BudgetError, OSError) as exc:
                delay = self._failed(session.key, exc)
                if raw:
                    return False  # even the raw copy failed: back off until a later job
                if attempts < MAX_FAILURES:  # the raw copy needs no model: nothing to wait out
                    await self.sleep(delay)
                continue
            if raw:
                self.failures.record_raw(session.key, len(chunk), self.clock())
                self.ended_raw[session.key] = self.ended_raw.get(session.key, 0) + 1
            else:
                self.failures.clear(session.key, self.clock())
            return True

    async def _compact(self, session: Session) -> bool:
        """Compact an oversized MEMORY.md before it goes into a prompt; False on failure."""
        if self.compactor is None or not self._with_memory(session):
            return True
        async with self._compacting:  # one compaction at a time; the next finds it done
            try:
                await self.compactor.compact_if_needed()
            except (ModelCallError, MemoryChangedError, OSError) as exc:
                self._failed(session.key, exc)
                return False
        return True

    def _failed(self, key: str, exc: BaseException) -> float:
        """Count a failure against `key`; return the backoff before its next attempt."""
        error = f"{type(exc).__name__}: {exc}"
        delay = self.failures.record(
            key,
            error,
            self.clock(),
            first=self.settings.retry_delay,
            cap=self.settings.max_retry_delay,
        )
        log.warning(
            "consolidation failed session=%s attempt=%d retry_in=%.1fs error=%s",
            key,
            self.failures.count(key),
            delay,
            error,
        )
        return delay


def _head(system: str) -> list[dict[str, Any]]:
    """The system prompt as the one message before the history (none when empty)."""
    return [{"role": "system", "content": system}] if system else []
