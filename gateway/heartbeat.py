"""The heartbeat: every `automation.heartbeat` seconds the agent reads HEARTBEAT.md in a session of
its own and may write to the owner's home chat; by default it stays silent.

A HEARTBEAT.md with no content (blank lines and headings only) costs nothing: no model call.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from gateway.bus import InboundMessage, OutboundMessage
from gateway.clock import Clock
from gateway.scheduler import Deliver, JobAgent

log = logging.getLogger(__name__)

HEARTBEAT_FILE = "HEARTBEAT.md"
SESSION = "heartbeat"
SILENT = "HEARTBEAT_OK"
PROMPT = f"""\
This is a scheduled heartbeat check, not a message from the owner. Below is the owner's \
checklist from {HEARTBEAT_FILE}. Check what it asks (use your tools if needed). If something \
needs the owner's attention now, write the short message to send them. If nothing does, answer \
exactly {SILENT} and nothing else.

{{checklist}}"""


def checklist(workspace: Path) -> str:
    """HEARTBEAT.md's text, or "" when it is missing or has only blank lines and headings."""
    try:
        text = (workspace / HEARTBEAT_FILE).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return text.strip() if lines else ""


class Heartbeat:
    """Wakes every `interval` seconds of the clock and runs one heartbeat turn if there is a list."""

    def __init__(self, workspace: Path, home: str, interval: float, clock: Clock) -> None:
        channel, _, chat_id = home.partition(":")
        self.workspace = workspace
        self.channel, self.chat_id = channel, chat_id
        self.interval = interval
        self.clock = clock
        self.beats = 0  # heartbeats that asked the model

    async def run(self, agent: JobAgent, deliver: Deliver) -> None:
        never = asyncio.Event()  # nothing wakes a heartbeat early; only time passes
        due = self.clock() + self.interval
        while True:
            await self.clock.sleep_until(due, never)
            if self.clock() < due:
                continue  # a long wait is taken in pieces
            due = self.clock() + self.interval
            try:
                await self.beat(agent, deliver)
            except Exception:
                log.exception("heartbeat failed")

    async def beat(self, agent: JobAgent, deliver: Deliver) -> None:
        """One heartbeat: nothing at all without a checklist; else a turn, sent unless silent."""
        text = await asyncio.to_thread(checklist, self.workspace)
        if not text:
            log.debug("heartbeat skipped: %s is empty", HEARTBEAT_FILE)
            return
        self.beats += 1
        reply = await agent.handle(
            InboundMessage(
                channel=self.channel,
                chat_id=self.chat_id,
                sender_id="heartbeat",
                sender_name="heartbeat",
                sender_is_owner=True,  # the owner's own checklist, answered in the private scope
                text=PROMPT.format(checklist=text),
                session_key=SESSION,
            )
        )
        answer = reply.text.strip() if reply is not None else ""
        if not answer or SILENT in answer:
            log.info("heartbeat: nothing to say")
            return
        problem = await deliver(OutboundMessage(self.channel, self.chat_id, answer))
        if problem is not None:
            log.warning(
                "heartbeat message not delivered home=%s:%s reason=%s",
                self.channel,
                self.chat_id,
                problem,
            )
