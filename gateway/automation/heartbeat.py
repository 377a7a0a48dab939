"""The heartbeat: every `automation.heartbeat` seconds the agent reads HEARTBEAT.md in a session of
its own and may write to the owner's home chat; by default it stays silent.

A HEARTBEAT.md with no content (blank lines and headings only) costs nothing: no model call.

Its messages go through the outbox as every answer does: stored as owed, marked delivered once the
channel took them. An answer a kill (or a channel that was not connected) kept from its chat is
sent at the next wake, before anything new is asked; a silent answer is owed to nobody.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

from gateway.automation.clock import Clock
from gateway.automation.scheduler import CHANNEL_WAIT, Deliver, JobAgent
from gateway.bus import InboundMessage, OutboundMessage

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


def is_silent(answer: str) -> bool:
    """Nothing to say: the answer is HEARTBEAT_OK itself (blank, or the word in Markdown emphasis
    or code, or with a full stop); an answer that only mentions it is a message for the owner."""
    return answer.strip().strip("*_`. \n") in ("", SILENT)


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

    async def run(
        self, agent: JobAgent, deliver: Deliver, connected: asyncio.Event | None = None
    ) -> None:
        """Beat until cancelled; what the last run owes goes first, once the home chat's channel
        is `connected` (waiting at most CHANNEL_WAIT, as a due job does)."""
        never = asyncio.Event()  # nothing wakes a heartbeat early; only time passes
        due = self.clock() + self.interval
        if connected is not None and not connected.is_set():
            await self.clock.sleep_until(self.clock() + CHANNEL_WAIT, connected)
        try:
            await self.send_owed(agent, deliver)  # what the last run stored but never sent
        except Exception:  # the heartbeat's loop outlives one failed wake (logged whole)
            log.exception("heartbeat could not send its owed messages")
        while True:
            await self.clock.sleep_until(due, never)
            if self.clock() < due:
                continue  # a long wait is taken in pieces
            due = self.clock() + self.interval
            try:
                await self.send_owed(agent, deliver)
                await self.beat(agent, deliver)
            except Exception:  # as above: the next wake tries again
                log.exception("heartbeat failed")

    async def send_owed(self, agent: JobAgent, deliver: Deliver) -> None:
        """Send the heartbeat's answers still owed to the home chat, oldest first; each is marked
        delivered by its channel. One that cannot go out now waits for the next wake."""
        for reply in await agent.owed(self.channel, self.chat_id, SESSION):
            if is_silent(reply.text):
                await reply.sent()  # silence is owed to nobody
                continue
            log.info("heartbeat: sending a message kept from before home=%s:%s",
                     self.channel, self.chat_id)  # fmt: skip
            if not await self._deliver(reply, deliver):
                return  # in order: the later ones wait behind it

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
        if reply is None:
            return
        answer = reply.text.strip()
        if is_silent(answer):
            log.info("heartbeat: nothing to say")
            await reply.sent()  # stored, but owed to nobody
            return
        # The reply itself, not a copy: it marks its stored answer delivered once sent.
        await self._deliver(replace(reply, text=answer), deliver)

    async def _deliver(self, reply: OutboundMessage, deliver: Deliver) -> bool:
        """Hand `reply` to its channel; False (and a warning) when it cannot take it now."""
        problem = await deliver(reply)
        if problem is None:
            return True
        log.warning(
            "heartbeat message not delivered home=%s:%s reason=%s",
            self.channel,
            self.chat_id,
            problem,
        )
        return False
