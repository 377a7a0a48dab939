"""Background consolidation: old messages become HISTORY.md entries and MEMORY.md facts.

The reply path only calls `after_turn()` / `after_rotate()`, which enqueue; `memory.workers` workers
do the model calls. A session has at most one job queued or running. Every write goes through
`MemoryFiles`, the one writer: MEMORY.md by compare-and-write (a merge that raced another write is
asked again), HISTORY.md entries tagged with their chunk so a retry never repeats one. Any failure
counts against its session, which then backs off (memory/failures.py). Requests are checked
against the prompt budget, and an oversized MEMORY.md is compacted first (memory/compact.py). The
model is reached through `SummaryModel`, an interface defined here so this package never imports
the gateway.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol

from memory.budget import PromptBudget
from memory.compact import MemoryCompactor
from memory.errors import BudgetError, MemoryChangedError, ModelCallError
from memory.failures import FailureLog
from memory.files import MemoryFiles
from memory.sessions import Message, Session, SessionStore
from memory.tokens import TokenCounter

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a memory consolidation agent. Call the save_memory tool with your consolidation "
    "of the conversation."
)
MAX_CHUNKS_PER_RUN = 5
MAX_FAILURES = 3
MERGE_ATTEMPTS = 5  # merges asked again in a row when MEMORY.md keeps changing under a call
RAW_CAP = 8_000  # characters of a [RAW] entry's lines
TOOL_RESULT_CHARS = 300
_LINE_OVERHEAD = 8  # tokens a "[YYYY-MM-DD HH:MM] ROLE: " prefix adds to a message
_STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")


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


class SummaryModel(Protocol):
    """The model call consolidation needs; the gateway adapts its chat provider to this."""

    async def call_tool(
        self, messages: list[dict[str, Any]], tool: dict[str, Any], *, force: bool
    ) -> Any:
        """Return the arguments the model gave the tool (any JSON shape), or None if it did not
        call it; raise ModelCallError (rejected_tool_choice=True if forcing was refused)."""
        ...


@dataclass(frozen=True)
class ConsolidationSettings:
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


@dataclass
class Job:
    """One unit of queued work; `ident` dedupes (a key, or an archived file's path)."""

    ident: str
    key: str
    archived: Path | None = None
    system_tokens: int = 0
    everything: bool = False  # consolidate all of it (archives, the CLI), not just what is due


@dataclass
class Outcome:
    chunks: int = 0
    messages: int = 0
    failed: bool = False


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
    ) -> None:
        self.sessions = sessions
        self.files = files
        self.counter = counter
        self.model = model
        self.settings = settings
        self.tz = tz
        self.budget = budget or PromptBudget(settings.budget, counter)
        self.compactor = compactor
        self._compacting = asyncio.Lock()
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._pending: set[str] = set()
        self.failures = FailureLog(failure_report)
        # Archive jobs waiting out a backoff, by job ident.
        self._retries: dict[str, asyncio.TimerHandle] = {}
        # How backoff tells and waits out time; a test may pass its own to see the delays.
        self.clock = clock
        self.sleep = sleep
        self._running = False
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.runs = 0
        self.progress: Callable[[str, int, int], None] | None = None
        self._closing = False
        self._changed = asyncio.Condition()

    # -- what the reply path calls: enqueue only -----------------------------------------------------
    def after_turn(self, session: Session, system_tokens: int) -> None:
        if self.backing_off(session.key):
            return  # a failing write path is not paid for on every turn
        self.enqueue(Job(session.key, session.key, system_tokens=system_tokens))

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
        if job.ident in self._pending:
            return False
        self._pending.add(job.ident)
        self._idle.clear()
        self._queue.put_nowait(job)
        return True

    @property
    def queue_depth(self) -> int:
        return len(self._pending)

    async def recover(self) -> int:
        """Queue archival left unfinished by a previous process (derived from the files)."""
        if not self.settings.archive_on_new:
            return 0
        count = 0
        for path in self.sessions.archived_paths():
            session = await self.sessions.open_archived(path)
            if session.unconsolidated:
                count += self.enqueue(Job(str(path), session.key, archived=path, everything=True))
        if count:
            log.info("resuming archival consolidation sessions=%d", count)
        return count

    # -- workers -------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the queue with `workers` workers until cancelled."""
        if self._running:
            raise RuntimeError("Consolidator.run() is already running")
        self._running = True
        try:
            async with asyncio.TaskGroup() as group:
                for index in range(self.settings.workers):
                    group.create_task(self._work(), name=f"consolidator-{index}")
        finally:
            self._running = False

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            if self._closing:
                continue  # left for the next start, which derives it from the files again
            self._active += 1
            again = False
            try:
                again = await self.process(job)
            except Exception:
                log.exception("consolidation job failed session=%s", job.key)
            finally:
                self._active -= 1
                self._pending.discard(job.ident)
                if again:
                    self.enqueue(job)
                elif job.archived is not None and self.backing_off(job.key):
                    self._retry_later(job)
                if not self._pending:
                    self._idle.set()
                async with self._changed:
                    self._changed.notify_all()

    def _retry_later(self, job: Job) -> None:
        """Queue an archive's job again when its backoff ends: no new turn will ever bring it
        back (a live session's next turn does, once its backoff is over)."""
        delay = max(0.0, self.failures.retry_at(job.key) - self.clock())
        loop = asyncio.get_running_loop()
        self._retries[job.ident] = loop.call_later(delay, self._retry_due, job)

    def _retry_due(self, job: Job) -> None:
        self._retries.pop(job.ident, None)
        if not self._closing:
            self.enqueue(job)

    async def wait_idle(self) -> None:
        """Wait until nothing is queued or running (tests, the CLI)."""
        await self._idle.wait()

    async def drain(self, grace: float) -> bool:
        """Start no new job and give running ones `grace` seconds; True if they all finished."""
        self._closing = True
        for handle in self._retries.values():
            handle.cancel()
        self._retries.clear()
        try:
            async with asyncio.timeout(grace), self._changed:
                await self._changed.wait_for(lambda: self._active == 0)
        except TimeoutError:
            log.warning(
                "consolidation still running after %.0fs; it resumes on the next start", grace
            )
            return False
        return True

    # -- one job ---------------------------------------------------------------------------------------
    async def process(self, job: Job) -> bool:
        """Consolidate up to MAX_CHUNKS_PER_RUN chunks; True if more remains to do right away."""
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
            chunks = await asyncio.to_thread(self._chunks, session, end)
            outcome = Outcome()
            for start, stop in chunks[:MAX_CHUNKS_PER_RUN]:
                if not await self._consolidate_chunk(session, start, stop):
                    outcome.failed = True
                    break
                outcome.chunks += 1
                outcome.messages += stop - start
                if self.progress is not None:
                    self.progress(session.key, stop, end)
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

    def _target(self, session: Session, job: Job) -> int | None:
        """The message index consolidation should reach now, at a user boundary; None if none."""
        start, count = session.last_consolidated, len(session.messages)
        if count - start <= 0:
            return None
        if job.everything:
            if job.archived is not None:
                return count  # an archive gets no more turns: all of it, trailing user included
            end = count
        else:
            end = start
            if count - start >= self.settings.window:
                end = count - self.settings.window // 2
            budget = self.settings.budget
            tokens = [session.tokens(i, self.counter) for i in range(start, count)]
            total = job.system_tokens + sum(tokens)
            if total >= self.settings.consolidate_at * budget:
                keep_at_most = self.settings.consolidate_to * budget - job.system_tokens
                cut, kept = count, 0
                while cut > start and kept + tokens[cut - 1 - start] <= keep_at_most:
                    kept += tokens[cut - 1 - start]
                    cut -= 1
                end = max(end, cut)
            if end <= start:
                return None
        end = _user_boundary(session.messages, end, start)
        return end if end > start else None

    def _chunks(self, session: Session, end: int) -> list[tuple[int, int]]:
        """Split [pointer, end) into pieces that fit a consolidation prompt, at user boundaries."""
        with_memory = not session.group or self.settings.shared_groups
        fixed = self.counter.count(SYSTEM_PROMPT) + self.counter.count_tools(
            [save_memory_tool(with_memory)]
        )
        if with_memory:
            fixed += self.counter.count(self.files.read_memory())
        # The prompt must fit the same budget as a chat prompt; a MEMORY.md so large that little
        # room is left still gets a workable chunk.
        limit = max(512, self.settings.budget - fixed - 64)
        chunks: list[tuple[int, int]] = []
        start = session.last_consolidated
        while start < end:
            stop, used = start, 0
            while stop < end:
                cost = session.tokens(stop, self.counter) + _LINE_OVERHEAD
                if used + cost > limit and stop > start:
                    break
                used += cost
                stop += 1
            if stop < end:
                boundary = _user_boundary_before(session.messages, stop, start)
                # A single turn larger than a chunk is consolidated whole rather than cut.
                stop = (
                    boundary if boundary > start else _user_boundary(session.messages, stop, start)
                )
            stop = min(stop, end)
            chunks.append((start, stop))
            start = stop
        return chunks

    async def _consolidate_chunk(self, session: Session, start: int, stop: int) -> bool:
        """Consolidate one chunk, retrying with backoff; False if it must wait for a later job.

        Any failure on the way (the model call, HISTORY.md, MEMORY.md, the session marker) counts
        against this session and grows its backoff. After MAX_FAILURES attempts the chunk goes to
        HISTORY.md raw; if even that fails, the session backs off (no job is queued for it until
        then) and the next job starts over, model call first, from the same pointer.
        """
        chunk = session.messages[start:stop]
        entry_id = _entry_id(session, start, stop)
        attempts = 0  # of this job; the session's count (for the backoff) may be higher
        while True:
            raw = attempts >= MAX_FAILURES
            attempts += 1
            try:
                if raw:
                    await self._write_raw(session, chunk, stop, entry_id)
                else:
                    await self._commit(session, chunk, stop, entry_id)
            except (ModelCallError, MemoryChangedError, BudgetError, OSError) as exc:
                delay = self._failed(session.key, exc)
                if raw:
                    return False  # even the raw copy failed: back off until a later job
                await self.sleep(delay)
                continue
            self.failures.clear(session.key, self.clock())
            return True

    async def _compact(self, session: Session) -> bool:
        """Compact an oversized MEMORY.md before it goes into a prompt; False on failure."""
        with_memory = not session.group or self.settings.shared_groups
        if self.compactor is None or not with_memory:
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

    async def _commit(
        self, session: Session, chunk: list[Message], stop: int, entry_id: str
    ) -> None:
        """Ask the model, then write HISTORY.md, MEMORY.md and the marker, in that order.

        HISTORY.md is tagged with `entry_id`, so a retry after a failure further on does not
        append the entry twice. MEMORY.md is written only if it still holds the text the model
        merged into; if it changed meanwhile, the merge is asked again against the new text.
        """
        with_memory = not session.group or self.settings.shared_groups
        for _ in range(MERGE_ATTEMPTS):
            before = await self.files.aread_memory() if with_memory else ""
            history_entry, memory_update = await self._ask(chunk, before, with_memory)
            await self.files.aappend_history(self._stamped(history_entry, chunk), entry_id=entry_id)
            if not with_memory:
                break
            try:
                await asyncio.to_thread(self._write_memory, memory_update, before)
            except MemoryChangedError:
                log.info("MEMORY.md changed during consolidation; merging again")
                continue
            break
        else:
            raise MemoryChangedError(f"MEMORY.md changed during {MERGE_ATTEMPTS} merges in a row")
        await self.sessions.mark_consolidated(session, stop)

    async def _ask(
        self, chunk: list[Message], memory_text: str, with_memory: bool
    ) -> tuple[str, str]:
        tool = save_memory_tool(with_memory)
        lines = "\n".join(self._format(m) for m in chunk)
        parts = []
        if with_memory:
            parts.append(f"## Current MEMORY.md\n\n{memory_text.strip()}")
        parts.append(f"## Conversation to consolidate\n\n{lines}")
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "\n\n".join(parts)},
        ]
        needed = await asyncio.to_thread(self.budget.size, messages, [tool])
        if needed > self.budget.limit:
            raise BudgetError(needed, self.budget.limit)
        try:
            async with asyncio.timeout(self.settings.timeout):
                try:
                    arguments = await self.model.call_tool(messages, tool, force=True)
                except ModelCallError as exc:
                    if not exc.rejected_tool_choice:
                        raise
                    log.info("provider refused forced tool_choice; retrying with auto")
                    arguments = await self.model.call_tool(messages, tool, force=False)
        except TimeoutError as exc:
            raise ModelCallError(f"no answer within {self.settings.timeout:.0f}s") from exc
        return _validate(arguments, with_memory)

    def _write_memory(self, text: str, previous: str) -> None:
        if len(previous) > 1000 and len(text) < len(previous) / 2:
            log.warning(
                "memory_update drops more than half of MEMORY.md (%d -> %d chars); "
                "previous version kept in memory/versions/",
                len(previous),
                len(text),
            )
        self.files.write_memory(text if text.endswith("\n") else text + "\n", expected=previous)

    async def _write_raw(
        self, session: Session, chunk: list[Message], stop: int, entry_id: str
    ) -> None:
        """After repeated failures, keep the chunk verbatim so nothing is lost, and move on."""
        body = "\n".join(self._format(m, shorten=False) for m in chunk)
        if len(body) > RAW_CAP:
            body = body[:RAW_CAP] + f"\n[... {len(body) - RAW_CAP} characters truncated]"
        stamp = self._stamp(chunk)
        await self.files.aappend_history(
            f"{stamp} [RAW] {len(chunk)} messages\n{body}", entry_id=entry_id
        )
        await self.sessions.mark_consolidated(session, stop)
        log.error(
            "consolidation failed %d times; chunk archived raw session=%s messages=%d",
            self.failures.count(session.key),
            session.key,
            len(chunk),
        )

    # -- formatting ----------------------------------------------------------------------------------
    def _when(self, message: Message) -> datetime:
        raw = message.get("timestamp")
        try:
            return datetime.fromisoformat(raw).astimezone(self.tz) if raw else datetime.now(self.tz)
        except (TypeError, ValueError):
            return datetime.now(self.tz)

    def _stamp(self, chunk: list[Message]) -> str:
        return self._when(chunk[-1]).strftime("[%Y-%m-%d %H:%M]")

    def _stamped(self, entry: str, chunk: list[Message]) -> str:
        entry = entry.strip()
        return entry if _STAMP.match(entry) else f"{self._stamp(chunk)} {entry}"

    def _format(self, message: Message, shorten: bool = True) -> str:
        role = str(message.get("role", "?")).upper()
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if message.get("tool_calls"):
            names = ", ".join(c.get("function", {}).get("name", "?") for c in message["tool_calls"])
            text = f"{text} [called {names}]".strip()
        if role == "TOOL" and shorten and len(text) > TOOL_RESULT_CHARS:
            text = text[:TOOL_RESULT_CHARS] + " [...]"
        return f"{self._when(message).strftime('[%Y-%m-%d %H:%M]')} {role}: {text}"


def _validate(arguments: Any, with_memory: bool) -> tuple[str, str]:
    """Accept a dict, a JSON string or a one-element list; both fields must be non-empty text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ModelCallError(f"save_memory arguments are not JSON: {exc.msg}") from exc
    if isinstance(arguments, list) and len(arguments) == 1:
        arguments = arguments[0]
    if isinstance(arguments, str):  # JSON text that itself held a JSON string
        return _validate(arguments, with_memory)
    if not isinstance(arguments, dict):
        raise ModelCallError("the model did not call save_memory with an object")
    history_entry = arguments.get("history_entry")
    memory_update = arguments.get("memory_update") if with_memory else ""
    if not isinstance(history_entry, str) or not history_entry.strip():
        raise ModelCallError("save_memory: history_entry is missing or empty")
    if with_memory and (not isinstance(memory_update, str) or not memory_update.strip()):
        raise ModelCallError("save_memory: memory_update is missing or empty")
    return history_entry, memory_update or ""


def _entry_id(session: Session, start: int, stop: int) -> str:
    """A name for one chunk of one conversation, the same on every retry of its job."""
    origin = f"{session.key}\0{session.created_at}\0{start}\0{stop}"
    return hashlib.sha256(origin.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _user_boundary(messages: list[Message], index: int, floor: int) -> int:
    """The first index >= `index` where a user message starts (or the end, if the last turn is
    complete): a chunk ending there never cuts a turn."""
    for position in range(max(index, floor + 1), len(messages)):
        if messages[position].get("role") == "user":
            return position
    last = messages[-1] if messages else {}
    complete = last.get("role") == "assistant" and not last.get("tool_calls")
    if complete:
        return len(messages)
    # The newest turn may still be running: stop before its user message.
    for position in range(len(messages) - 1, floor, -1):
        if messages[position].get("role") == "user":
            return position
    return floor


def _user_boundary_before(messages: list[Message], index: int, floor: int) -> int:
    """The last index in (floor, index] where a user message starts; `floor` if none."""
    for position in range(index, floor, -1):
        if position < len(messages) and messages[position].get("role") == "user":
            return position
    return floor
