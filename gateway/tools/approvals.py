"""Approvals: a command waiting for the owner's yes in the chat that asked for it.

A request is shown in its chat with an id and two buttons, Approve and Deny, standing for
`/approve ID` and `/deny ID`; either command from the owner in that same chat (typed, or a button
pressed) answers it, and no answer within the timeout refuses it. Only the waiting turn waits: the
answer arrives as a command, which the agent handles outside any session's lock, so other chats
(and this one's commands) go on. A guest, or anyone in a group, cannot answer one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

from gateway.bus import Button, InboundMessage, OutboundMessage, typed_command
from gateway.tools.registry import turn_stream

log = logging.getLogger(__name__)

# How a request reaches its chat (the service's delivery to channels); None when it was taken.
Notify = Callable[[OutboundMessage], Awaitable[str | None]]


class Decision(Enum):
    APPROVED = "approved by the owner"
    DENIED = "refused by the owner"
    TIMED_OUT = "refused: the owner did not answer in time"
    UNREACHABLE = "refused: the request could not be shown in the chat"


@dataclass
class _Pending:
    key: str
    command: str
    answer: asyncio.Future[bool] = field(default_factory=lambda: asyncio.Future())


class Approvals:
    """The requests waiting for an answer, by id."""

    def __init__(self, timeout: float, notify: Notify | None = None) -> None:
        self.timeout = timeout
        self.notify = notify  # set by the service once its channels exist
        self._pending: dict[str, _Pending] = {}

    def waiting(self) -> dict[str, str]:
        """The commands waiting, by id (for tests and status)."""
        return {ident: pending.command for ident, pending in self._pending.items()}

    async def ask(self, origin: InboundMessage, command: str) -> Decision:
        """Show `command` in `origin`'s chat and wait for the owner's answer there."""
        ident = secrets.token_hex(3)
        pending = _Pending(origin.key, command)
        self._pending[ident] = pending
        shown = command if len(command) <= 600 else command[:600] + " …"
        request = OutboundMessage(
            origin.channel,
            origin.chat_id,
            f"Run this command? Answer within {self.timeout:g} s.\n\n{shown}",
            buttons=(Button("Approve", f"/approve {ident}"), Button("Deny", f"/deny {ident}")),
        )
        try:
            problem = (
                "no way to reach the chat" if self.notify is None else await self.notify(request)
            )
            if problem is not None and (stream := turn_stream.get()) is not None:
                # A chat no message can reach (a terminal attached to the service) may still
                # show the turn's own stream.
                await stream.status(request.text_with_commands())
                problem = None
            if problem is not None:
                log.warning("approval request not shown session=%s reason=%s", origin.key, problem)
                return Decision.UNREACHABLE
            log.info("approval asked session=%s id=%s", origin.key, ident)
            try:
                async with asyncio.timeout(self.timeout):
                    approved = await pending.answer
            except TimeoutError:
                log.info("approval timed out session=%s id=%s", origin.key, ident)
                return Decision.TIMED_OUT
            return Decision.APPROVED if approved else Decision.DENIED
        finally:
            del self._pending[ident]

    def answer(self, approve: bool, args: str, message: InboundMessage) -> str:
        """`/approve ID` or `/deny ID`: the reply for the chat."""
        word = typed_command(message.channel, "/approve" if approve else "/deny")
        ident = args.strip().split()[0] if args.strip() else ""
        if message.is_group or not message.sender_is_owner:
            return f"Only the owner can {word}, in a private chat."
        if not ident:
            waiting = [i for i, p in self._pending.items() if p.key == message.key]
            if not waiting:
                return "Nothing is waiting for approval here."
            return f"Waiting: {', '.join(waiting)}. Send {word} ID."
        pending = self._pending.get(ident)
        # Another chat's request is as unknown here as one that never was.
        if pending is None or pending.key != message.key or pending.answer.done():
            return f"No request {ident} is waiting in this chat."
        pending.answer.set_result(approve)
        log.info("approval answered session=%s id=%s approved=%s", message.key, ident, approve)
        return "Approved: running it." if approve else "Denied: it will not run."
