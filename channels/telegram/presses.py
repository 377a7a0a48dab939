"""Buttons on Telegram: a message's `Button`s as an inline keyboard, and a press on one (a
callback query) read back as the command it stands for, sent by the presser.

A press is judged by the same admission as a typed message from the same person in the same chat,
and answered by the same agent; the button grants nothing. Telegram wants every press answered
(answerCallbackQuery ends the client's spinner). Once an owner's press has been answered, the
choice is made and the keyboard goes (editMessageReplyMarkup); anyone else's press is only their
own message, so the owner still has the buttons. Part of the Telegram adapter, so it may import
`telegram`; of ours `gateway.bus`, admission's `Request` and the adapter's mentions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from telegram import Bot, CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message
from telegram.constants import ChatType
from telegram.error import TelegramError

from channels.admission import Request
from channels.telegram.mentions import GROUPS
from gateway.bus import BUTTON_COMMAND_BYTES, Button

log = logging.getLogger(__name__)


def keyboard(buttons: Sequence[Button]) -> InlineKeyboardMarkup | None:
    """One row of inline buttons, each carrying its command as callback_data; None for none."""
    if not buttons:
        return None
    row = [InlineKeyboardButton(b.label, callback_data=b.command) for b in buttons]
    return InlineKeyboardMarkup([row])


@dataclass(frozen=True, slots=True)
class Press:
    """A press read from a callback query: who pressed, on which message of which chat, and the
    command its button stands for."""

    query_id: str
    request: Request
    chat_id: int
    message_id: int  # the pressed message (the bot's own)
    thread_id: int | None
    command: str


def read_press(query: CallbackQuery) -> Press | None:
    """The press in `query`; None for one that is no command on a chat we serve (a button of an
    inline message, a channel post's, data that is not a /command)."""
    pressed, data = query.message, query.data
    if pressed is None or not data or not data.startswith("/"):
        return None
    if len(data.encode("utf-8")) > BUTTON_COMMAND_BYTES or pressed.chat.type == ChatType.CHANNEL:
        return None
    user = query.from_user
    is_group = pressed.chat.type in GROUPS
    # Pressing the bot's button addresses the bot, as a reply to its message does.
    request = Request(
        str(user.id), username=user.username, name=user.full_name, is_group=is_group, addressed=True
    )
    thread = (
        pressed.message_thread_id
        if isinstance(pressed, Message) and pressed.is_topic_message
        else None
    )
    return Press(query.id, request, pressed.chat.id, pressed.message_id, thread, data.strip())


async def answer_press(bot: Bot, query_id: str) -> None:
    """Tell Telegram the press was received; the answer itself comes as a message."""
    try:
        await bot.answer_callback_query(query_id)
    except TelegramError as exc:  # too old (a replay after a restart), or already answered
        log.info("telegram could not answer a press query_id=%s error=%s", query_id, exc)


async def close_keyboard(bot: Bot, chat_id: int, message_id: int) -> None:
    """Take the buttons off the pressed message: the choice is made."""
    try:
        await bot.edit_message_reply_markup(chat_id=chat_id, message_id=message_id)
    except TelegramError as exc:  # deleted, too old, or already without buttons: nothing to take
        log.info("telegram could not remove a keyboard chat_id=%s error=%s", chat_id, exc)
