"""A Discord reply shown while it is written: a message sent, then edited about once a second.

Part of the Discord adapter, so it may import `discord`; of ours `channels.base` for the split and
`channels.live` for the timing. discord.py waits out Discord's rate limits (429) itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.base import split_message
from channels.discord.connect import NETWORK_ERRORS, discord
from channels.live import LiveReply, Pacer

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 2000  # characters per Discord message
SEND_TIMEOUT = 90.0  # above the client's max_ratelimit_timeout, as for whole replies


class DiscordSurface:
    """A live reply's `Surface` on Discord: no drafts; messages split at 2,000 characters with
    their code blocks closed and reopened, the first answering the person's message."""

    def __init__(
        self,
        channel: discord.PartialMessageable,
        reference: discord.MessageReference | None,
        pacer: Pacer,
    ) -> None:
        self._channel = channel
        self._reference = reference
        self._pacer = pacer

    def split(self, text: str) -> list[str]:
        return split_message(text, MESSAGE_LIMIT)

    async def preview(self, text: str) -> bool:
        return False  # Discord has no drafts

    async def post(self, text: str, *, final: bool, first: bool) -> object | None:
        options: dict[str, Any] = (
            {"reference": self._reference} if first and self._reference else {}
        )
        if not final and not await self._pacer.turn(self._channel.id, wait=False):
            return None  # sent at the next update
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                return await self._channel.send(text, **options)
        except NETWORK_ERRORS as exc:
            log.error("discord send failed chat_id=%s error=%r", self._channel.id, exc)
            return None

    async def edit(self, message: object, text: str, *, final: bool) -> bool:
        assert isinstance(message, discord.Message)
        if not await self._pacer.turn(self._channel.id, wait=final):
            return True  # skipped; the next update shows the text as it then stands
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await message.edit(content=text)
        except NETWORK_ERRORS as exc:
            log.warning("discord edit failed chat_id=%s error=%r", self._channel.id, exc)
            return False
        return True


def live_reply(
    channel: discord.PartialMessageable, reference: discord.MessageReference | None, pacer: Pacer
) -> LiveReply:
    """A reply streamed into `channel`, its first message answering `reference`."""
    return LiveReply(DiscordSurface(channel, reference, pacer))
