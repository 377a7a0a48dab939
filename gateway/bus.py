"""The message types every channel and the agent share; this module imports nothing of ours.

A channel turns each platform message into an `InboundMessage`, hands it to a `Handler`, and sends
back the `OutboundMessage` it returns (if any). The handler is the agent; channels never see it.
A channel with streaming on also hands it a `ReplyStream`, where the answer shows while it is
written; the returned reply is still the whole answer, which the channel puts in place of the draft.
Once the platform has taken a reply (or refused it for good), the channel awaits `reply.sent()`: a
stored answer is owed until then, and owed answers are sent again after a restart.

A message may offer `Button`s, each a label and the command it stands for. A platform with buttons
shows them (Telegram's inline keyboard) and turns a press into that command sent by the presser,
admitted and answered exactly as if they had typed it; any other shows the commands to type.
Every text of ours that names a command (those, /help, a pairing code's reply) writes it with
`typed_command`, as it is typed on the message's platform.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

_UNSAFE_PART = re.compile(r"[^0-9A-Za-z_-]")

# Ends an answer /stop cut short; the channels mark a message left showing only a tool note with it.
STOPPED_MARK = "(stopped)"


def scrub(text: str) -> str:
    """Replace lone UTF-16 surrogates, which no file or wire format can carry, with U+FFFD.

    JSON allows "\\ud800" and Python decodes it into a str that UTF-8 cannot encode; such text
    must not reach the session files or the model. Valid surrogate pairs are joined.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def media_folder(channel: str, chat_id: str) -> str:
    """`media/<channel>/<chat>`: where one chat's attachments go, so no chat sees another's.

    Chat ids are numbers on every platform; anything else is replaced so the name stays one
    folder (never `..`, never a separator).
    """
    return f"media/{_UNSAFE_PART.sub('_', channel)}/{_UNSAFE_PART.sub('_', chat_id)}"


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message received from a platform, normalized."""

    channel: str
    chat_id: str
    sender_id: str
    text: str
    sender_name: str = ""
    media: tuple[str, ...] = ()  # paths relative to the workspace, e.g. "media/telegram/42/…"
    is_group: bool = False
    # Listed by id or name in the channel's allow_from (not let in by "*"): the owner. A message
    # from anyone else runs in the group scope, even in a DM; so the safe default is False.
    sender_is_owner: bool = False
    mentioned: bool = False  # the bot was mentioned or replied to
    message_id: str | None = None
    # Session key override for sub-conversations (Telegram forum topics, Discord threads).
    session_key: str | None = None
    # The sender's @name where allow_from may list people by it (Telegram); a job records it.
    sender_username: str | None = None

    def __post_init__(self) -> None:
        if not self.channel or ":" in self.channel:
            raise ValueError(f"channel must be a non-empty name without ':', got {self.channel!r}")
        if not self.chat_id:
            raise ValueError("chat_id must not be empty")
        object.__setattr__(self, "text", scrub(self.text))
        object.__setattr__(self, "sender_name", scrub(self.sender_name))

    @property
    def key(self) -> str:
        """The session key, `channel:chat_id` unless the channel chose a finer one."""
        return self.session_key or f"{self.channel}:{self.chat_id}"


# Platforms that keep every message starting with "/" to their own commands, so it never reaches
# the bot, and the one slash command of ours that memgate's commands are typed through there: the
# Slack app's manifest declares /memgate (README), and channels/slack reads `/memgate new` back as
# `/new`.
SLASH_COMMANDS: dict[str, str] = {"slack": "/memgate"}


def typed_command(channel: str, command: str) -> str:
    """How memgate's `command` (`/approve 3f2a`, `/forget TEXT`) is typed on `channel`: through
    its slash command where the platform keeps `/…` messages (Slack's `/memgate approve 3f2a`),
    else as it stands."""
    through = SLASH_COMMANDS.get(channel)
    return command if through is None else f"{through} {command.removeprefix('/')}"


# Telegram carries a button's command as its callback_data: 1 to 64 bytes.
BUTTON_COMMAND_BYTES = 64


@dataclass(frozen=True, slots=True)
class Button:
    """A choice under a message: pressing it is the presser sending `command` (e.g. the label
    "Approve" for "/approve 3f2a"). It grants nothing: the command meets the same admission and
    the same checks as when typed, so a button is never a way around who may do what."""

    label: str
    command: str

    def __post_init__(self) -> None:
        if not self.label.strip():
            raise ValueError("a button needs a label")
        size = len(self.command.encode("utf-8"))
        if not self.command.startswith("/") or not 1 < size <= BUTTON_COMMAND_BYTES:
            raise ValueError(
                f"a button's command is a /command of at most {BUTTON_COMMAND_BYTES} bytes, "
                f"got {self.command!r}"
            )


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """One reply to send to a platform; the channel splits it to the platform's limit."""

    channel: str
    chat_id: str
    text: str
    reply_to: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)  # e.g. {"thread_id": "7"}
    failed: bool = False  # the text is an apology for an error, not an answer
    # The stored answer's id, where there is one: a platform that deduplicates by a client key
    # (Discord's nonce) is given it, so a resend after a restart cannot post the answer twice.
    reply_id: str | None = None
    # Marks a stored answer delivered; set by whoever recorded the answer as owed (the outbox).
    on_sent: Callable[[], Awaitable[None]] | None = field(default=None, compare=False, repr=False)
    buttons: tuple[Button, ...] = ()  # choices offered under the message, in order

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", scrub(self.text))

    def text_with_commands(self) -> str:
        """The text, followed by its buttons' commands as typed on this message's platform
        (`typed_command`): what a platform that shows no buttons (or a message that cannot carry
        them) shows instead."""
        if not self.buttons:
            return self.text
        commands = [typed_command(self.channel, b.command) for b in self.buttons]
        return f"{self.text}\n\nReply {' or '.join(commands)}."

    async def sent(self) -> None:
        """The platform took this reply (or refused it for good): it is no longer owed.

        Never raises: a mark that cannot be written only means the reply is sent again after a
        restart, which is the at-least-once promise.
        """
        if self.on_sent is None:
            return
        try:
            await self.on_sent()
        except Exception as exc:
            # The reply is out; its mark is best effort (a lost one costs a resend the replay
            # recognises). This module imports nothing of ours, so it cannot name the store's errors.
            log.warning("could not mark a reply delivered chat_id=%s error=%s", self.chat_id, exc)


class ReplyStream(Protocol):
    """Where a channel shows an answer while the agent writes it (a draft, an edited message,
    the terminal). Both calls must return at once: the model's stream waits on them."""

    async def write(self, text: str) -> None:
        """The answer grew by `text`."""
        ...

    async def status(self, note: str) -> None:
        """A tool step runs: show `note` instead of the text so far; the next write starts anew."""
        ...


class Handler(Protocol):
    """What a channel hands each message to (the agent); `stream` only with streaming on."""

    def __call__(
        self, message: InboundMessage, /, stream: ReplyStream | None = None
    ) -> Awaitable[OutboundMessage | None]: ...
