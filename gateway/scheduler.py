"""The scheduler: runs each job when it comes due, once, and delivers what it made to its chat.

It sleeps until the next due job (a job added, cancelled or resumed wakes it). A run is recorded in
the job file before its turn starts, so a crash right after a run never repeats it; a job that came
due while the process was down runs once if it is at most `grace` seconds late, else it is skipped
with a log line. A text that cannot be delivered is kept and tried again a few times; then the job
is paused with the reason, for `memgate jobs list` to show.
"""

from __future__ import annotations

import asyncio
import logging
import zoneinfo
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.bus import InboundMessage, OutboundMessage
from gateway.clock import Clock
from gateway.jobs import Job, JobStore, format_time, next_after

log = logging.getLogger(__name__)

# Seconds before each new delivery attempt; after the last one fails the job is paused.
RETRY_DELAYS = (15.0, 60.0, 300.0)
SCHEDULER_SENDER = "scheduler"

Deliver = Callable[[OutboundMessage], Awaitable[str | None]]
"""Sends a message to a chat nobody is waiting on; None when delivered, else why it was not."""


class JobAgent(Protocol):
    """What the scheduler needs of the agent: a turn, and an assistant line stored in order."""

    async def handle(self, message: InboundMessage) -> OutboundMessage | None: ...

    async def record_assistant(self, key: str, text: str, extra: dict[str, str]) -> None: ...


class Scheduler:
    """Owns the job store at run time; the tools, `/jobs` and the control socket go through it."""

    def __init__(self, store: JobStore, clock: Clock, tz: zoneinfo.ZoneInfo, grace: float) -> None:
        self.store = store
        self.clock = clock
        self.tz = tz
        self.grace = grace
        self._wake = asyncio.Event()
        self._busy: set[str] = set()
        self._moved = asyncio.Condition()  # notified when a job starts or finishes its work
        self._started = False
        self.runs = 0  # jobs run (turns or messages made), for tests and status

    # -- changes (each wakes the loop) -------------------------------------------------------------
    def add(self, job: Job) -> Job:
        self.store.put(job)
        log.info("job added id=%s kind=%s session=%s", job.id, job.kind, job.session)
        self._wake.set()
        return job

    def cancel(self, job_id: str, session: str | None = None) -> Job | None:
        """Remove a job; with `session`, only one of that chat's jobs."""
        job = self.store.get(job_id)
        if job is None or (session is not None and job.session != session):
            return None
        self.store.remove(job_id)
        log.info("job removed id=%s", job_id)
        self._wake.set()
        return job

    def pause(self, job_id: str, reason: str = "paused by the owner") -> Job | None:
        job = self.store.get(job_id)
        if job is None:
            return None
        job = self.store.update(job, paused=reason)
        self._wake.set()
        return job

    def resume(self, job_id: str) -> Job | None:
        job = self.store.get(job_id)
        if job is None:
            return None
        now = self.clock()
        retry = now if job.pending is not None else None
        job = self.store.update(job, paused=None, failures=0, retry_at=retry)
        self._wake.set()
        return job

    @property
    def idle(self) -> bool:
        """No job is being run or delivered right now."""
        return not self._busy

    async def wait_for(self, check: Callable[[], bool]) -> None:
        """Wait until `check()` holds, looking again each time a job starts or finishes."""
        async with self._moved:
            await self._moved.wait_for(check)

    async def _notify(self) -> None:
        async with self._moved:
            self._moved.notify_all()

    def jobs(self, session: str | None = None) -> list[Job]:
        return [j for j in self.store.all() if session is None or j.session == session]

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self, agent: JobAgent, deliver: Deliver) -> None:
        """Run due jobs through `agent` until cancelled; each job's work runs as its own task."""
        if self._started:
            raise RuntimeError("Scheduler.run() was already started")
        self._started = True
        async with asyncio.TaskGroup() as group:
            while True:
                self._wake.clear()  # before looking: a change made after this wakes the wait
                now = self.clock()
                for job in self.store.all():
                    if job.id in self._busy:
                        continue
                    if job.kind == "at" and job.next_run is None and job.pending is None:
                        # Ran, and the process stopped before its entry was removed.
                        self.store.remove(job.id)
                        continue
                    due = job.due
                    if due is None or due > now:
                        continue
                    claimed = self._claim(job, now)
                    if claimed is not None:
                        self._busy.add(job.id)
                        work = self._work(claimed, agent, deliver)
                        group.create_task(work, name=f"job-{job.id}")
                await self.clock.sleep_until(self._next_wake(), self._wake)

    def _next_wake(self) -> float | None:
        times = [j.due for j in self.store.all() if j.id not in self._busy and j.due is not None]
        return min(times) if times else None

    def _claim(self, job: Job, now: float) -> Job | None:
        """Record the run (or skip a run missed by too much) before any work; the job to work on."""
        if job.pending is not None:
            return job  # a delivery to try again
        assert job.next_run is not None
        late = now - job.next_run
        following = next_after(job, now, self.tz)
        if late > self.grace:
            log.warning(
                "job skipped: missed by more than automation.grace id=%s due=%s late_s=%d next=%s",
                job.id,
                format_time(job.next_run, self.tz),
                late,
                "none" if following is None else format_time(following, self.tz),
            )
            if following is None:
                self.store.remove(job.id)
            else:
                self.store.update(job, next_run=following, last_due=job.next_run)
            return None
        self.store.update(job, next_run=following, last_due=job.next_run)
        return job

    async def _work(self, job: Job, agent: JobAgent, deliver: Deliver) -> None:
        await self._notify()
        try:
            text = job.pending if job.pending is not None else await self._make(job, agent)
            if text:
                await self._deliver(job, text, deliver)
            elif job.kind == "at":
                self.store.remove(job.id)
        except Exception:
            log.exception("job failed id=%s session=%s", job.id, job.session)
        finally:
            self._busy.discard(job.id)
            self._wake.set()
            await self._notify()

    async def _make(self, job: Job, agent: JobAgent) -> str | None:
        """The text a run produces: the message (stored in the session), or a turn's answer."""
        self.runs += 1
        await self._notify()
        log.info("job running id=%s kind=%s session=%s", job.id, job.kind, job.session)
        if job.message is not None:
            await agent.record_assistant(job.session, job.message, {"job": job.id})
            return job.message
        due = int(job.next_run or 0)
        reply = await agent.handle(
            InboundMessage(
                channel=job.channel,
                chat_id=job.chat_id,
                sender_id=SCHEDULER_SENDER,
                sender_name=f"scheduled job {job.id}",
                # Only the owner's private chats can make jobs, so its turns are the owner's.
                sender_is_owner=True,
                text=job.prompt or "",
                message_id=f"job-{job.id}-{due}",  # marks the turn as scheduled in the session
                session_key=job.session,
            )
        )
        return reply.text if reply is not None else None

    async def _deliver(self, job: Job, text: str, deliver: Deliver) -> None:
        problem = await deliver(OutboundMessage(job.channel, job.chat_id, text))
        current = self.store.get(job.id)
        if problem is None:
            log.info("job delivered id=%s session=%s", job.id, job.session)
            if current is None:
                return
            if current.kind == "at":
                self.store.remove(job.id)
            elif current.pending is not None:
                self.store.update(current, pending=None, failures=0, retry_at=None)
            return
        if current is None:
            log.warning("job undeliverable and since removed id=%s reason=%s", job.id, problem)
            return
        failures = current.failures + 1
        if failures > len(RETRY_DELAYS):
            reason = f"delivery failed {failures} times: {problem}"
            log.error("job paused id=%s session=%s reason=%s", job.id, job.session, reason)
            self.store.update(current, pending=text, failures=failures, paused=reason)
            return
        delay = RETRY_DELAYS[failures - 1]
        log.warning(
            "job delivery failed, trying again id=%s reason=%s delay_s=%.0f", job.id, problem, delay
        )
        self.store.update(current, pending=text, failures=failures, retry_at=self.clock() + delay)
