"""The `InboundMessage` a Telegram update makes: a person's message (its media downloaded into
the chat's folder), or a button press read as the command it stands for.

Part of the Telegram adapter, so it may import `telegram`; of ours `gateway.bus` and the
adapter's media, mentions, delivery targets and presses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from telegram import Message

from channels.telegram.delivery import Target
from channels.telegram.media import attachments, download
from channels.telegram.mentions import GROUPS
from channels.telegram.presses import Press
from gateway.bus import InboundMessage

CHANNEL = "telegram"
# Whether a sender (id, @name) is listed in allow_from: admission's `is_owner`.
IsOwner = Callable[[str, str | None], bool]


def topic_key(target: Target) -> str | None:
    """A forum topic's own session key; None outside a topic (the chat's key is used)."""
    return f"{CHANNEL}:{target.chat_id}:topic:{target.thread_id}" if target.thread_id else None


async def read_message(
    message: Message,
    text: str,
    addressed: bool,
    target: Target,
    workspace: Path,
    is_owner: IsOwner,
) -> InboundMessage | None:
    """`message` with `text` (our mention removed), its attachments downloaded and noted; None
    when nothing is left to hand on."""
    notes: list[str] = []
    media: list[str] = []
    for kind, attachment, name in attachments(message):
        note, path = await download(workspace, kind, attachment, name, str(target.chat_id))
        notes.append(note)
        if path:
            media.append(path)
    body = "\n".join([*notes, text]).strip()
    if not body:
        return None
    user = message.from_user
    assert user is not None
    return InboundMessage(
        channel=CHANNEL,
        chat_id=str(target.chat_id),
        sender_id=str(user.id),
        text=body,
        sender_name=user.full_name,  # InboundMessage scrubs lone surrogates
        media=tuple(media),
        is_group=message.chat.type in GROUPS,
        sender_is_owner=is_owner(str(user.id), user.username),
        sender_username=user.username,  # a job records it: allow_from may list @names
        mentioned=addressed,
        message_id=str(message.message_id),
        session_key=topic_key(target),
    )


def press_message(press: Press, is_owner: IsOwner) -> InboundMessage:
    """The press as the presser's own message: the command, from them, in the pressed chat. Its
    id is the pressed message's, which the answer in a group replies to."""
    request = press.request
    return InboundMessage(
        channel=CHANNEL,
        chat_id=str(press.chat_id),
        sender_id=request.sender_id,
        text=press.command,
        sender_name=request.name,
        is_group=request.is_group,
        sender_is_owner=is_owner(request.sender_id, request.username),
        sender_username=request.username,
        mentioned=True,
        message_id=str(press.message_id),
        session_key=topic_key(Target(press.chat_id, press.thread_id)),
    )
