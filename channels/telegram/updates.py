"""How Telegram updates enter the adapter: PTB's update queue that journals each one first, the
getUpdates request that steps over an update PTB cannot parse, and that parsing itself.

Part of the Telegram adapter, so it may import `telegram`; of ours only the inbox's JSON type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

from telegram import Bot, Update
from telegram.request import HTTPXRequest

from channels.inbox import Json

log = logging.getLogger(__name__)


class UpdateQueue(asyncio.Queue[object]):
    """PTB's update queue: polling and the webhook put every update here before Telegram learns
    that it arrived, so `accept` can journal it first; an update it refuses is dropped."""

    def __init__(self, accept: Callable[[object], bool]) -> None:
        super().__init__()
        self._accept = accept

    async def put(self, item: object) -> None:
        self.put_nowait(item)  # unbounded: never waits

    def put_nowait(self, item: object) -> None:
        if self._accept(item):
            super().put_nowait(item)


class UpdatesRequest(HTTPXRequest):
    """The getUpdates connection. PTB refetches forever a batch holding an update it cannot
    parse (logging the batch, message texts included, at CRITICAL each time), so such an update
    is handed on as its bare update_id: polling moves past it and the channel finishes it.
    `parse_json_payload` is PTB's documented hook for reading the Bot API's JSON."""

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        data = HTTPXRequest.parse_json_payload(payload)
        result = data.get("result")
        if isinstance(result, list):
            data["result"] = [update for raw in result if (update := _readable(raw)) is not None]
        return data


def _readable(raw: Any) -> Json | None:
    """`raw` if PTB can parse it; else its bare update_id (the skip is logged by read_update)."""
    if read_update(raw, None) is not None:
        return cast(Json, raw)
    update_id = raw.get("update_id") if isinstance(raw, dict) else None
    return {"update_id": update_id} if isinstance(update_id, int) else None


def read_update(raw: Any, bot: Bot | None) -> Update | None:
    """The update PTB parses from `raw` (from the wire, or the inbox at a replay); None when it
    cannot, logged without any of the update's content."""
    try:
        return Update.de_json(raw, bot)
    except Exception as exc:  # PTB's parsing of a strange field raises whatever it hits (KeyError,
        # TypeError, ValueError, RecursionError…); the data comes from outside, and one update
        # must stop neither polling nor a start
        update_id = raw.get("update_id") if isinstance(raw, dict) else None
        kinds = sorted(str(k) for k in raw if k != "update_id") if isinstance(raw, dict) else []
        log.error(
            "telegram skipping an update it cannot parse update_id=%s kinds=%s error=%s",
            update_id,
            ",".join(kinds),
            type(exc).__name__,
        )
        log.debug("telegram unparseable update update_id=%s", update_id, exc_info=True)
        return None


def update_date(update: Update) -> int:
    """The message's date in epoch seconds, 0 for an update without a message."""
    message = update.message
    return int(message.date.timestamp()) if message is not None else 0
