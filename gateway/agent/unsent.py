"""Answers handed to a channel and not yet reported sent, counted per session.

`/new` waits for them: rotated before the channel finished its inbox entry, a kill would replay a
message the new file does not hold, and answer it twice. Imports only `gateway.bus` of ours.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from gateway.bus import OutboundMessage


class UnsentReplies:
    """Counts each session's answers out with a channel until the channel reports them sent."""

    def __init__(self) -> None:
        self._unsent: dict[str, int] = {}
        self._sent = asyncio.Condition()

    def track(self, reply: OutboundMessage, key: str) -> OutboundMessage:
        """Count `reply` as unsent for its session until its channel reports it sent."""
        mark = reply.on_sent
        if mark is None:
            return reply
        self._unsent[key] = self._unsent.get(key, 0) + 1
        done = False

        async def sent() -> None:
            nonlocal done
            try:
                await mark()
            finally:
                if not done:
                    done = True
                    self._unsent[key] -= 1
                    if not self._unsent[key]:
                        del self._unsent[key]
                    async with self._sent:
                        self._sent.notify_all()

        return replace(reply, on_sent=sent)

    async def wait_sent(self, key: str) -> None:
        """Return once every answer of session `key` handed to a channel is reported sent."""
        async with self._sent:
            await self._sent.wait_for(lambda: key not in self._unsent)
