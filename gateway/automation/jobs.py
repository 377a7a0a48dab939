"""Scheduled jobs: what one is, when it runs next, and the file that keeps them across restarts.

A job is tied to the chat it was made in, and records who made it: it runs only while that person
is an owner (see gateway/automation/scheduler.py). Its next run is kept in UTC epoch seconds; calendar rules
(`at` without an offset, `cron`) are read in the job's time zone, so 08:00 stays 08:00 across a
daylight-saving change. The jobs live in `STATE/jobs.json`, rewritten atomically on every change.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import zoneinfo
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from croniter import croniter

from memory.fileio import atomic_write

log = logging.getLogger(__name__)

JOBS_FILE = "jobs.json"
MIN_EVERY = 60.0  # seconds; anything more frequent is a loop, not a reminder
Kind = Literal["at", "every", "cron"]

_PART = re.compile(r"(\d+)\s*([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class JobError(ValueError):
    """A job that cannot be made as asked; the message says why and is shown to the asker."""


@dataclass(frozen=True)
class Job:
    """One scheduled job; `next_run` is None once a one-off job has run (it is then removed)."""

    id: str
    session: str  # the session key its turns and messages go to
    channel: str
    chat_id: str
    kind: Kind
    spec: str  # the ISO date-time, the interval or the cron expression, as given
    timezone: str
    next_run: float | None
    message: str | None = None
    prompt: str | None = None
    created: float = 0.0
    # Who made it (a sender id, and the @name where the platform has one) and whose rights its runs
    # have; None in a job made before makers were recorded: its private chat's person then.
    creator: str | None = None
    creator_username: str | None = None
    last_due: float | None = None  # the due time of the last run recorded (never run twice)
    paused: str | None = None  # why it is paused; None when active
    pending: str | None = None  # a text made whose delivery failed, to be tried again
    failures: int = 0  # delivery attempts of `pending` that failed
    retry_at: float | None = None
    # The run under way ("job-<id>-<due>"): recorded with the run, cleared once its text is
    # delivered. One left behind by a kill is finished at the next start, never started afresh.
    run: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def due(self) -> float | None:
        """When the scheduler must next look at this job (a retry or a run); None: never."""
        if self.paused is not None:
            return None
        if self.pending is not None:
            return self.retry_at
        if self.run is not None:
            return self.last_due or 0.0  # a run a kill interrupted: finish it now
        return self.next_run

    def describe(self, tz: zoneinfo.ZoneInfo) -> str:
        """One line for `/jobs` and `memgate jobs list`."""
        what = (
            f"message {self.message!r}" if self.message is not None else f"prompt {self.prompt!r}"
        )
        if len(what) > 70:
            what = what[:67] + "..."
        when = "done" if self.next_run is None else format_time(self.next_run, tz)
        state = f" PAUSED ({self.paused})" if self.paused else ""
        return f"{self.id}  {self.kind} {self.spec}  next {when}  {self.session}  {what}{state}"


def format_time(epoch: float, tz: zoneinfo.ZoneInfo) -> str:
    return datetime.fromtimestamp(epoch, tz).strftime("%Y-%m-%d %H:%M:%S %Z")


def parse_interval(text: str) -> float:
    """`90s`, `30m`, `1h30m`, `2d`, `1w` or a number of seconds, in seconds."""
    raw = text.strip().lower().replace(" ", "")
    if raw.isdigit():
        seconds = float(raw)
    else:
        parts = _PART.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise JobError(f"every: {text!r} is not an interval like 30m, 2h, 1h30m or 1d")
        seconds = float(sum(int(n) * _UNIT[u] for n, u in parts))
    if seconds < MIN_EVERY:
        raise JobError(f"every: {text!r} is too often; the shortest interval is 1m")
    return seconds


def parse_at(text: str, tz: zoneinfo.ZoneInfo) -> float:
    """An ISO 8601 date-time; without an offset it is read in `tz`."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise JobError(f"at: {text!r} is not an ISO 8601 date-time like 2026-12-02T09:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return moment.timestamp()


def check_cron(expression: str) -> str:
    expression = " ".join(expression.split())
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise JobError(
            f"cron: {expression!r} is not a cron expression of five fields "
            "(minute hour day-of-month month day-of-week), e.g. '0 8 * * 1-5'"
        )
    return expression


def next_cron(expression: str, after: float, tz: zoneinfo.ZoneInfo) -> float:
    """The first time after `after` whose wall-clock time in `tz` matches `expression`.

    The expression is walked in naive local time, then each match is placed in the zone: a wall
    time that does not exist (the hour skipped in spring) runs at the same offset as before the
    change, i.e. just after it; one that happens twice (autumn) runs once, the first time.
    """
    local = datetime.fromtimestamp(after, tz).replace(tzinfo=None)
    walker = croniter(expression, local - timedelta(minutes=1))
    for _ in range(1000):  # a bound: a valid expression matches within a few years
        candidate = walker.get_next(datetime).replace(tzinfo=tz, fold=0).timestamp()
        if candidate > after:
            return candidate
    raise JobError(f"cron: {expression!r} never matches")


def next_after(job: Job, now: float, tz: zoneinfo.ZoneInfo) -> float | None:
    """The next due time of a job after it came due at `job.next_run`; None for a one-off."""
    assert job.next_run is not None
    if job.kind == "at":
        return None
    if job.kind == "every":
        step = parse_interval(job.spec)
        # Keep the job's rhythm: the next multiple of the interval after now, never a burst.
        missed = max(0, int((now - job.next_run) // step))
        return job.next_run + (missed + 1) * step
    return next_cron(job.spec, max(now, job.next_run), tz)


def new_job(
    *,
    session: str,
    channel: str,
    chat_id: str,
    now: float,
    tz: zoneinfo.ZoneInfo,
    at: str | None = None,
    every: str | None = None,
    cron: str | None = None,
    message: str | None = None,
    prompt: str | None = None,
    creator: str | None = None,
    creator_username: str | None = None,
) -> Job:
    """A checked job from what a person (or the model) asked for."""
    rules = [(k, v) for k, v in (("at", at), ("every", every), ("cron", cron)) if v]
    if len(rules) != 1:
        raise JobError("give exactly one of at, every or cron")
    texts = [t for t in (message, prompt) if t and t.strip()]
    if len(texts) != 1:
        raise JobError("give exactly one of message (sent as is) or prompt (run as a turn)")
    if prompt is not None and prompt.strip().startswith("/"):
        raise JobError("prompt must not start with '/': commands cannot be scheduled")
    kind, rule = rules[0]
    rule = str(rule).strip()
    if kind == "at":
        first = parse_at(rule, tz)
        if first <= now:
            raise JobError(f"at: {rule!r} is in the past (now is {format_time(now, tz)})")
    elif kind == "every":
        first = now + parse_interval(rule)
    else:
        rule = check_cron(rule)
        first = next_cron(rule, now, tz)
    return Job(
        id=secrets.token_hex(3),
        session=session,
        channel=channel,
        chat_id=chat_id,
        kind=kind,  # type: ignore[arg-type]  # one of the three names above
        spec=rule,
        timezone=tz.key,
        next_run=first,
        message=message.strip() if message else None,
        prompt=prompt.strip() if prompt else None,
        created=now,
        creator=creator,
        creator_username=creator_username,
    )


class JobStore:
    """All jobs, in memory and in one JSON file written atomically (0600) on every change."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / JOBS_FILE
        self._jobs: dict[str, Job] = self._load()

    def _load(self) -> dict[str, Job]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:
            # Refuse to start over an unreadable file: writing would lose every job in it.
            raise JobError(f"{self.path}: cannot read the jobs ({exc})") from exc
        jobs: dict[str, Job] = {}
        for record in raw.get("jobs", []):
            try:
                job = Job(**record)
            except TypeError as exc:
                log.warning("skipping an unreadable job path=%s error=%s", self.path, exc)
                continue
            jobs[job.id] = job
        return jobs

    def _save(self) -> None:
        data = {"version": 1, "jobs": [asdict(job) for job in self._jobs.values()]}
        atomic_write(self.path, json.dumps(data, ensure_ascii=False, indent=1) + "\n")

    def all(self) -> list[Job]:
        return sorted(self._jobs.values(), key=lambda j: (j.next_run or 0, j.id))

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def put(self, job: Job) -> None:
        self._jobs[job.id] = job
        self._save()

    def update(self, job: Job, **changes: Any) -> Job:
        changed = replace(job, **changes)
        self.put(changed)
        return changed

    def remove(self, job_id: str) -> Job | None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            self._save()
        return job

    def next_due(self) -> float | None:
        times = [job.due for job in self._jobs.values() if job.due is not None]
        return min(times) if times else None
