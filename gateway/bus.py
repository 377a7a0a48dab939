"""The message types every channel and the agent share; this module imports nothing of ours.

A channel turns each platform message into an `InboundMessage`, hands it to a `Handler`, and sends
back the `OutboundMessage` it returns (if any). The handler is the agent; channels never see it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message received from a platform, normalized."""

    channel: str
    chat_id: str
    sender_id: str
    text: str
    sender_name: str = ""
    media: tuple[str, ...] = ()  # paths relative to the workspace, e.g. "media/telegram/…"
    is_group: bool = False
    mentioned: bool = False  # the bot was mentioned or replied to
    message_id: str | None = None
    # Session key override for sub-conversations (Telegram forum topics, Discord threads).
    session_key: str | None = None

    def __post_init__(self) -> None:
        if not self.channel or ":" in self.channel:
            raise ValueError(f"channel must be a non-empty name without ':', got {self.channel!r}")
        if not self.chat_id:
            raise ValueError("chat_id must not be empty")

    @property
    def key(self) -> str:
        """The session key, `channel:chat_id` unless the channel chose a finer one."""
        return self.session_key or f"{self.channel}:{self.chat_id}"


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """One reply to send to a platform; the channel splits it to the platform's limit."""

    channel: str
    chat_id: str
    text: str
    reply_to: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)  # e.g. {"thread_id": "7"}


Handler = Callable[[InboundMessage], Awaitable[OutboundMessage | None]]
