"""The outbox: every stored answer is owed to its chat until the platform has taken it.

An answer is appended to its session carrying a `reply_id`; that one line both stores the answer
and records it as owed, so no kill can fall between the two. When the channel has sent the reply it
awaits `OutboundMessage.sent()`, which appends a `{"_type": "delivered", "reply_id": …}` line.
After a restart, an answer without its delivered line is sent again: delivery is at least once, and
a repeat is only possible for a kill between the platform's acceptance and that line.

Any producer of a reply (a turn, a scheduled job) goes through `Outbox.owe` and `Outbox.reply`.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from gateway.agent.replay import REPLAY_WINDOW
from gateway.bus import OutboundMessage
from memory.sessions.file import Message
from memory.sessions.store import Session, SessionStore


class Outbox:
    """Owes stored answers to their chats and marks them delivered once sent."""

    def __init__(self, sessions: SessionStore) -> None:
        self.sessions = sessions

    async def owe(self, session: Session, content: str, **fields: Any) -> Message:
        """Store an answer in `session` as owed; returns the stored message (with its reply_id)."""
        message: Message = {
            "role": "assistant",
            "content": content,
            **fields,
            "reply_id": uuid.uuid4().hex[:16],
        }
        await self.sessions.add_messages(session, [message])
        return session.messages[-1]

    def reply(
        self, session: Session, stored: Message, outbound: OutboundMessage
    ) -> OutboundMessage:
        """`outbound` made to mark `stored` delivered when its channel reports it sent."""
        reply_id = stored.get("reply_id")
        if not isinstance(reply_id, str):
            return outbound

        async def delivered() -> None:
            # The session object, not its key: after /new it appends to the archived file.
            await self.sessions.mark_delivered(session, reply_id)

        return replace(outbound, reply_id=reply_id, on_sent=delivered)

    async def once(
        self, session: Session, outbound: OutboundMessage, job: str, run: str
    ) -> OutboundMessage | None:
        """Job `job`'s text for its run `run`, stored as owed the first time; asked again (after
        a kill) it is the line stored then, or None once that line was delivered."""
        recent = session.messages[-REPLAY_WINDOW:]
        stored = next((m for m in reversed(recent) if m.get("run") == run), None)
        if stored is None:
            stored = await self.owe(session, outbound.text, job=job, run=run)
        elif stored.get("reply_id") in session.delivered:
            return None
        # The text stored then, not the one asked with now: a background task's result, stored
        # before a kill, is sent as it is, not replaced by the note of its interruption.
        return self.reply(session, stored, replace(outbound, text=str(stored.get("content"))))

    @staticmethod
    def owed(session: Session) -> list[Message]:
        """The answers of `session` still owed to its chat, oldest first."""
        return session.owed()
