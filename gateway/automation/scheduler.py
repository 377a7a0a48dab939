"""The scheduler: runs each job when it comes due, once, and delivers what it made to its chat.

It sleeps until the next due job (a job added, cancelled or resumed wakes it). A run is recorded in
the job file before its turn starts, so a crash right after a run never repeats it; a job that came
due while the process was down runs once if it is at most `grace` seconds late, else it is skipped
with a log line. A due job first waits for its chat's channel to connect (at most `CHANNEL_WAIT`),
so what came due while the process was down goes out as soon as the platform is reachable, not
after a failed attempt and a retry's delay. A text that cannot be delivered is kept and tried again
a few times; then the job is paused with the reason, for `memgate jobs list` to show.

A job runs with the rights its maker has when it runs, not when it was made: each time it comes
due the scheduler asks the access settings in force (`Owners`, which a reload changes) whether its
maker is still an owner. If not, the job is paused with that reason before anything is made: no
model call, no message, not even a reminder's text (the person is no longer served at all).

What a run makes goes through the outbox like any answer: it is stored in the chat's session as
owed and marked delivered once the platform took it. The run itself (`Job.run`) stays recorded until
then, so a kill between making and delivering is finished at the next start: a message already
stored is sent, not stored again; a turn carries on as any replayed message does (no tool runs
twice); an answer already marked delivered is not sent again.
"""

from __future__ import annotations

import asyncio
import logging
import zoneinfo
from collections.abc import Awaitable, Callable
from typing import Protocol

from gateway.automation.clock import Clock
from gateway.automation.jobs import Job, JobStore, format_time, next_after
from gateway.bus import InboundMessage, OutboundMessage

log = logging.getLogger(__name__)

# Seconds before each new delivery attempt; after the last one fails the job is paused.
RETRY_DELAYS = (15.0, 60.0, 300.0)
# Seconds a due job waits for its channel to connect; past it, it is tried (and retried) anyway.
CHANNEL_WAIT = 60.0
SCHEDULER_SENDER = "scheduler"

Deliver = Callable[[OutboundMessage], Awaitable[str | None]]
"""Sends a message to a chat nobody is waiting on; None when delivered, else why it was not."""

ChannelReady = Callable[[str], asyncio.Event | None]
"""A channel's event, set while it is connected; None when no such channel runs here."""


class Owners(Protocol):
    """Whether a person is an owner now, by the access settings in force (a reload changes them).

    `username` is the @name the person had when they made the job, where the platform has one."""

    def __call__(self, channel: str, sender_id: str, username: str | None) -> bool: ...


class JobAgent(Protocol):
    """What the scheduler and the heartbeat need of the agent: a turn, an owed assistant line stored
    in order, and the answers a session still owes."""

    async def handle(self, message: InboundMessage) -> OutboundMessage | None: ...

    async def job_message(
        self, channel: str, chat_id: str, key: str, text: str, job: str, run: str
    ) -> OutboundMessage | None: ...

    async def owed(self, channel: str, chat_id: str, key: str) -> list[OutboundMessage]: ...


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
        retry = now if job.pending is not None or job.run is not None else None
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

    def running(self, run: str | None) -> Job | None:
        """The job whose run `run` is under way (a scheduled turn's message id), if any."""
        if run is None:
            return None
        return next((job for job in self.store.all() if job.run == run), None)

    # -- the loop ----------------------------------------------------------------------------------
    async def run(
        self, agent: JobAgent, deliver: Deliver, owners: Owners, ready: ChannelReady
    ) -> None:
        """Run due jobs through `agent` until cancelled; each job's work runs as its own task,
        once `ready` says its channel is connected. A job whose maker `owners` no longer lists is
        paused instead."""
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
                    if job.kind == "at" and job.next_run is None and job.pending is job.run is None:
                        # Ran, and the process stopped before its entry was removed.
                        self.store.remove(job.id)
                        continue
                    due = job.due
                    if due is None or due > now:
                        continue
                    refused = not_an_owner(job, owners)
                    if refused is not None:
                        self.store.update(job, paused=refused)
                        log.warning("job paused id=%s session=%s reason=%s", job.id, job.session,
                                    refused)  # fmt: skip
                        continue
                    claimed = self._claim(job, now)
                    if claimed is not None:
                        self._busy.add(job.id)
                        work = self._work(claimed, agent, deliver, ready(claimed.channel))
                        group.create_task(work, name=f"job-{job.id}")
                await self.clock.sleep_until(self._next_wake(), self._wake)

    def _next_wake(self) -> float | None:
        times = [j.due for j in self.store.all() if j.id not in self._busy and j.due is not None]
        return min(times) if times else None

    def _claim(self, job: Job, now: float) -> Job | None:
        """Record the run (or skip a run missed by too much) before any work; the job to work on."""
        if job.pending is not None or job.run is not None:
            return job  # a delivery to try again, or a run a kill interrupted
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
        run = f"job-{job.id}-{int(job.next_run)}"  # also the turn's message id in the session
        return self.store.update(job, next_run=following, last_due=job.next_run, run=run)

    async def _work(
        self, job: Job, agent: JobAgent, deliver: Deliver, connected: asyncio.Event | None
    ) -> None:
        await self._notify()
        try:
            if connected is not None and not connected.is_set():
                # Just started, most likely: the channel connects within seconds, then this job
                # runs at once instead of failing and waiting out a retry's delay.
                log.info("job waits for its channel id=%s channel=%s", job.id, job.channel)
                await self.clock.sleep_until(self.clock() + CHANNEL_WAIT, connected)
            # The run's stored answer, owed until the platform takes it; or, when a refusal has
            # already closed it in the session, the text kept for another attempt.
            reply = await self._make(job, agent) if job.run is not None else None
            if reply is None and job.pending is not None:
                reply = OutboundMessage(job.channel, job.chat_id, job.pending)
            if reply is not None and reply.text:
                await self._deliver(job, reply, deliver)
            else:
                self._finished(job)
        except Exception:
            # This job's own task: a bug in one job must not end the scheduler's task group and
            # with it every other job (a turn's own failures are already its reply).
            log.exception("job failed id=%s session=%s", job.id, job.session)
        finally:
            self._busy.discard(job.id)
            self._wake.set()
            await self._notify()

    async def _make(self, job: Job, agent: JobAgent) -> OutboundMessage | None:
        """What a run produces, stored in the session as owed: the message, or a turn's answer.
        None when there is nothing (left) to deliver. Asked again for the same run after a kill,
        it finds what the first attempt stored instead of making it twice."""
        assert job.run is not None
        self.runs += 1
        await self._notify()
        log.info("job running id=%s kind=%s session=%s", job.id, job.kind, job.session)
        if job.message is not None:
            return await agent.job_message(
                job.channel, job.chat_id, job.session, job.message, job.id, job.run
            )
        return await agent.handle(
            InboundMessage(
                channel=job.channel,
                chat_id=job.chat_id,
                sender_id=SCHEDULER_SENDER,
                sender_name=f"scheduled job {job.id}",
                # Its maker was an owner when it came due (`not_an_owner`): the owner's scope.
                sender_is_owner=True,
                text=job.prompt or "",
                message_id=job.run,  # marks the turn as scheduled; a replay finds it by this id
                session_key=job.session,
            )
        )

    def _finished(self, job: Job) -> None:
        """The run is over (delivered, or nothing to deliver): forget it; a one-off job goes."""
        current = self.store.get(job.id)
        if current is None:
            return
        if current.kind == "at":
            self.store.remove(job.id)
        elif current.pending is not None or current.run is not None:
            self.store.update(current, pending=None, run=None, failures=0, retry_at=None)

    async def _deliver(self, job: Job, reply: OutboundMessage, deliver: Deliver) -> None:
        problem = await deliver(reply)
        current = self.store.get(job.id)
        text = reply.text
        if problem is None:
            log.info("job delivered id=%s session=%s", job.id, job.session)
            self._finished(job)
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


def not_an_owner(job: Job, owners: Owners) -> str | None:
    """Why `job` may not run now (its maker is no longer an owner), or None when it may.

    A job made before makers were recorded is taken as made by its chat: jobs are made only in an
    owner's private chat, and a Telegram private chat's id is its person's id. Elsewhere (a Discord
    DM's id is the channel's, not the person's) no owner has that id and the job is paused with a
    reason saying so."""
    maker = job.creator or job.chat_id
    if owners(job.channel, maker, job.creator_username):
        return None
    if job.creator is None:
        return (
            f"made before memgate recorded who makes a job, and {job.channel} chat {job.chat_id} "
            "is not an owner's; make it again"
        )
    return f"made by {job.channel} user {maker}, no longer an owner"
