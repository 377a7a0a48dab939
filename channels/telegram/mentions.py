"""Whether a Telegram message is addressed to the bot, read from its entities (UTF-16 offsets),
and the admission request a message makes.

Part of the Telegram adapter, so it may import `telegram`; of ours the UTF-16 helpers and
admission's `Request`.
"""

from __future__ import annotations

from dataclasses import dataclass

from telegram import Message, MessageEntity
from telegram.constants import ChatType

from channels.admission import Request
from channels.utf16 import utf16_cut, utf16_length, utf16_slice

GROUPS = (ChatType.GROUP, ChatType.SUPERGROUP)


@dataclass(frozen=True, slots=True)
class Addressing:
    """Addressed to us (mention, our command, a reply to us); a command for another bot; the
    text with our own @mention and command suffix removed."""

    addressed: bool
    for_another_bot: bool
    text: str


def read_addressing(message: Message, bot_id: int, bot_username: str) -> Addressing:
    """How `message` addresses the bot with id `bot_id` and username `bot_username`."""
    text = message.text or message.caption or ""
    entities = message.entities or message.caption_entities or ()
    me = bot_username.lower()
    addressed = foreign = False
    cuts: list[tuple[int, int]] = []
    for entity in entities:
        part = utf16_slice(text, entity.offset, entity.length)
        if entity.type == MessageEntity.MENTION and me and part[1:].lower() == me:
            addressed = True
            cuts.append((entity.offset, entity.length))
        elif entity.type == MessageEntity.TEXT_MENTION and entity.user is not None:
            addressed = addressed or entity.user.id == bot_id
        elif entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            command, _, bot = part.partition("@")
            if not bot or bot.lower() == me:
                addressed = True
                skip = utf16_length(command)
                cuts.append((entity.offset + skip, entity.length - skip))
            else:
                foreign = True
    reply = message.reply_to_message
    if (
        reply is not None
        and reply.from_user is not None
        and reply.from_user.id == bot_id
        and reply.forum_topic_created is None  # a topic's root, not a reply to us
    ):
        addressed = True
    return Addressing(addressed, foreign, utf16_cut(text, cuts).strip())


def admission_request(
    message: Message, bot_id: int, bot_username: str
) -> tuple[Request, Addressing] | None:
    """What admission judges of `message`, and how it addresses the bot; None for a message no
    person sent to a chat we serve (a channel post)."""
    user = message.from_user
    if user is None or message.chat.type == ChatType.CHANNEL:
        return None
    addressing = read_addressing(message, bot_id, bot_username)
    request = Request(
        str(user.id),
        username=user.username,
        name=user.full_name,
        is_group=message.chat.type in GROUPS,
        addressed=addressing.addressed,
        for_another_bot=addressing.for_another_bot,
    )
    return request, addressing
