"""A Discord reply shown while it is written: a message sent, then edited about once a second.

Part of the Discord adapter, so it may import `discord`; of ours `channels.base` for the split and
`channels.live` for the timing. discord.py waits out Discord's rate limits (429) itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
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

    async def post(self, text: str, *, final: bool, first: bool) -> int | None:
        options: dict[str, Any] = (
            {"reference": self._reference} if first and self._reference else {}
        )
        if not final and not await self._pacer.turn(self._channel.id, wait=False):
            return None  # sent at the next update
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                return (await self._channel.send(text, **options)).id
        except NETWORK_ERRORS as exc:
            log.error("discord send failed chat_id=%s error=%r", self._channel.id, exc)
            return None

    async def edit(self, message: int, text: str, *, final: bool) -> bool:
        if not await self._pacer.turn(self._channel.id, wait=final):
            return True  # skipped; the next update shows the text as it then stands
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await self._channel.get_partial_message(message).edit(content=text)
        except (discord.NotFound, discord.Forbidden) as exc:  # deleted, or no access any more
            log.info("discord message cannot be edited chat_id=%s error=%r", self._channel.id, exc)
            return False
        except NETWORK_ERRORS as exc:
            log.warning("discord edit failed chat_id=%s error=%r", self._channel.id, exc)
            return not final  # a passing failure: the next update tries again
        return True

    async def delete(self, message: int) -> None:
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await self._channel.get_partial_message(message).delete()
        except NETWORK_ERRORS as exc:  # gone already, or not ours to delete: it stays
            log.info(
                "discord could not delete a message chat_id=%s error=%r", self._channel.id, exc
            )


def live_reply(
    channel: discord.PartialMessageable,
    reference: discord.MessageReference | None,
    pacer: Pacer,
    shown: Sequence[int] = (),
    on_shown: Callable[[list[int]], None] | None = None,
) -> LiveReply:
    """A reply streamed into `channel`, its first message answering `reference` (`shown`,
    `on_shown`: see `LiveReply`)."""
    surface = DiscordSurface(channel, reference, pacer)
    return LiveReply(surface, shown=shown, on_shown=on_shown)
