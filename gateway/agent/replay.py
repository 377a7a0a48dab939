"""A message a channel replays after a crash: what its session already holds decides what to do.

Channels with an inbox hand a message to the agent again when the process died before they
finished it. The session file says how far its turn got: answered and sent, answered but never
sent, cut short during its tool steps, or stored with nothing after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from memory.sessions.file import Message
from memory.sessions.index import KEEP_RECENT
from memory.sessions.store import Session, turn_after

# Most recent messages searched for a replayed message id: a session always has them loaded.
REPLAY_WINDOW = KEEP_RECENT


class ReplayAction(Enum):
    """What the agent does with a replayed message; the value is its log line."""

    ANSWERED = "skipping replayed message, answered"
    LEFT_BEHIND = "skipping replayed message, a later one followed"
    RESEND = "sending again an answer owed before a restart"
    RESUME = "resuming a turn interrupted by a restart"
    ANSWER = "answering a message interrupted by a restart"


@dataclass(frozen=True)
class Replay:
    index: int  # of the stored user message in the session
    action: ReplayAction
    answer: Message | None = None  # the stored answer, for RESEND
    steps: list[Message] = field(default_factory=list)  # stored tool steps, for RESUME


def find_replay(session: Session, message_id: str) -> Replay | None:
    """The replay of channel message `message_id`, or None when the session never stored it."""
    index = stored_at(session, message_id)
    if index is None:
        return None
    steps, answer, left_behind = turn_after(session.messages, index)
    if answer is not None:
        reply_id = answer.get("reply_id")
        # Stored but never marked delivered: the kill came before the platform took it.
        owed = bool(reply_id) and reply_id not in session.delivered
        return Replay(index, ReplayAction.RESEND if owed else ReplayAction.ANSWERED, answer)
    if left_behind:
        return Replay(index, ReplayAction.LEFT_BEHIND)
    if steps:
        return Replay(index, ReplayAction.RESUME, steps=steps)
    # Stored, then the process died before any answer: answer it now, storing it once.
    return Replay(index, ReplayAction.ANSWER)


def stored_at(session: Session, message_id: str) -> int | None:
    """Index of the user message carrying this channel message id, among the recent ones."""
    start = max(0, len(session.messages) - REPLAY_WINDOW)
    for index in range(len(session.messages) - 1, start - 1, -1):
        message = session.messages[index]
        if message.get("role") == "user" and message.get("message_id") == message_id:
            return index
    return None
