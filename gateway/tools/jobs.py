"""How people and the model reach the scheduler from a chat: the `schedule`, `list_jobs` and
`cancel_job` tools (private chats only) and the `/jobs` command.

The chat a job belongs to is the chat whose turn made it (`turn_origin`), never an argument the
model could point elsewhere; so is its maker, whose rights the job's runs have. So the terminal
makes none: nothing there could take a message when the job is due.
"""

from __future__ import annotations

import zoneinfo
from typing import Any

from gateway.automation.heartbeat import SESSION as HEARTBEAT_SESSION
from gateway.automation.jobs import JobError, format_time, new_job
from gateway.automation.scheduler import SCHEDULER_SENDER, Scheduler
from gateway.bus import InboundMessage, typed_command
from gateway.tools.registry import Tool, ToolError, turn_origin

GROUP_REFUSAL = "scheduled jobs can be made only in a private chat with the owner"
# A terminal is there only while someone types in it (attached to the service or not), so a job's
# message would wait, owed, for a chat that may never come back.
TERMINAL_REFUSAL = (
    "the terminal has no way to deliver a message later; schedule from Telegram or Discord"
)


class JobTools:
    """The three tools and `/jobs`, for one scheduler."""

    def __init__(self, scheduler: Scheduler, tz: zoneinfo.ZoneInfo) -> None:
        self.scheduler = scheduler
        self.tz = tz

    def _origin(self) -> InboundMessage:
        origin = turn_origin.get()
        if origin is None:
            raise ToolError("no chat is asking; jobs belong to a chat")
        if origin.is_group or not origin.sender_is_owner:
            raise ToolError(GROUP_REFUSAL)
        return origin

    async def _schedule(self, arguments: dict[str, Any]) -> str:
        origin = self._origin()
        if origin.channel == "terminal":
            raise ToolError(TERMINAL_REFUSAL)

        def text(key: str) -> str | None:
            value = arguments.get(key)
            if value is not None and not isinstance(value, str):
                raise ToolError(f"{key} must be a string")
            return value or None

        creator, username = self._maker(origin)
        try:
            job = new_job(
                session=origin.key,
                channel=origin.channel,
                chat_id=origin.chat_id,
                now=self.scheduler.clock(),
                tz=self.tz,
                at=text("at"),
                every=text("every"),
                cron=text("cron"),
                message=text("message"),
                prompt=text("prompt"),
                creator=creator,
                creator_username=username,
            )
        except JobError as exc:
            raise ToolError(str(exc)) from None
        self.scheduler.add(job)
        assert job.next_run is not None
        return f"Scheduled job {job.id}; first run {format_time(job.next_run, self.tz)}."

    def _maker(self, origin: InboundMessage) -> tuple[str | None, str | None]:
        """Who makes a job in this turn: its sender, or for the gateway's own turns whoever they
        stand for (None: the chat's person, as for a job made before makers were recorded)."""
        if origin.sender_id == SCHEDULER_SENDER:
            # A job's turn: the job it makes has the maker of the job being run.
            running = self.scheduler.running(origin.message_id)
            return (running.creator, running.creator_username) if running else (None, None)
        if origin.key == HEARTBEAT_SESSION:
            return None, None  # the owner's checklist, answered for the home chat
        return origin.sender_id, origin.sender_username

    async def _list(self, arguments: dict[str, Any]) -> str:
        return self.describe(self._origin().key)

    async def _cancel(self, arguments: dict[str, Any]) -> str:
        origin = self._origin()
        job_id = str(arguments.get("id", "")).strip()
        if self.scheduler.cancel(job_id, session=origin.key) is None:
            raise ToolError(f"no job {job_id!r} in this chat (see list_jobs)")
        return f"Cancelled job {job_id}."

    def describe(self, session: str) -> str:
        jobs = self.scheduler.jobs(session)
        if not jobs:
            return "No scheduled jobs in this chat."
        return "\n".join(job.describe(self.tz) for job in jobs)

    def command(self, args: str, message: InboundMessage) -> str:
        """`/jobs` lists this chat's jobs; `/jobs cancel ID` removes one of them."""
        if message.is_group or not message.sender_is_owner:
            return f"Sorry: {GROUP_REFUSAL}."
        words = args.split()
        if not words:
            return self.describe(message.key)
        if words[0] in ("cancel", "remove") and len(words) == 2:
            if self.scheduler.cancel(words[1], session=message.key) is None:
                return f"No job {words[1]} in this chat."
            return f"Cancelled job {words[1]}."
        jobs = typed_command(message.channel, "/jobs")
        return f"Usage: {jobs}, or {jobs} cancel ID"

    def operate(self, action: str, job_id: str = "") -> tuple[bool, str]:
        """`memgate jobs ACTION [ID]` for every chat's jobs: (done, text to print)."""
        if action == "list":
            jobs = self.scheduler.jobs()
            if not jobs:
                return True, "No scheduled jobs."
            return True, "\n".join(job.describe(self.tz) for job in jobs)
        changes = {
            "remove": self.scheduler.cancel,
            "pause": self.scheduler.pause,
            "resume": self.scheduler.resume,
        }
        change = changes.get(action)
        if change is None:
            return False, f"unknown action {action!r}; use list, remove, pause or resume"
        if change(job_id) is None:
            return False, f"no job {job_id!r} (see memgate jobs list)"
        done = {"remove": "Removed", "pause": "Paused", "resume": "Resumed"}[action]
        return True, f"{done} job {job_id}."

    def control_op(self, request: dict[str, Any]) -> dict[str, Any]:
        """The control socket's `jobs` op: `memgate jobs` while the service runs."""
        done, text = self.operate(str(request.get("action")), str(request.get("id") or ""))
        return {"ok": done, "text": text}

    def tools(self) -> list[Tool]:
        # Short texts: these schemas are in every private prompt, within the token budget.
        return [
            Tool(
                "schedule",
                "Schedule a reminder or recurring task in this chat: one of at, every or cron, and "
                f"one of message (sent as is) or prompt (run by you when due). Zone {self.tz.key}.",
                {
                    "type": "object",
                    "properties": {
                        "at": {"type": "string", "description": "ISO date-time"},
                        "every": {"type": "string", "description": "e.g. 30m, 2h, 1d"},
                        "cron": {"type": "string", "description": "e.g. 0 8 * * 1-5"},
                        "message": {"type": "string"},
                        "prompt": {"type": "string"},
                    },
                    "required": [],
                },
                self._schedule,
            ),
            Tool(
                "list_jobs",
                "List this chat's scheduled jobs.",
                {"type": "object", "properties": {}, "required": []},
                self._list,
            ),
            Tool(
                "cancel_job",
                "Cancel a scheduled job of this chat by id.",
                {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
                self._cancel,
            ),
        ]
