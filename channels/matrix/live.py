"""Sending to a Matrix room: a reply's parts as formatted messages (in a thread, answering the
person's message), and a reply shown while it is written: a message sent, then replaced by
`m.replace` edits about once a second.

The live seam (channels/live.py) and the inbox count a reply's messages by integer ids; a Matrix
event id is carried as the integer of its bytes (`event_number`), so it survives the inbox's
JSON unchanged and comes back whole (`event_id_of`). nio waits out `M_LIMIT_EXCEEDED` for its
`retry_after_ms`. Part of the Matrix adapter, so it may import `nio`; of ours `channels.base`,
`channels.live` and the adapter's own modules.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nio

from channels.base import split_message
from channels.live import LiveReply, Pacer
from channels.matrix.connect import NETWORK_ERRORS
from channels.matrix.render import message_content

log = logging.getLogger(__name__)

# Characters per message: an event is at most 64 KiB, and its HTML can be twice its Markdown.
MESSAGE_LIMIT = 16_000
SEND_TIMEOUT = 90.0  # above a few honoured rate limits, as for the other platforms


def event_number(event_id: str) -> int:
    """An event id as the integer the live seam and the inbox count messages by."""
    return int.from_bytes(b"\x01" + event_id.encode("utf-8"), "big")


def event_id_of(number: int) -> str:
    """The event id `event_number` made `number` from."""
    return number.to_bytes((number.bit_length() + 7) // 8, "big")[1:].decode("utf-8")


@dataclass(frozen=True, slots=True)
class Target:
    """Where a reply goes: a room, a thread in it, and the message it answers."""

    room_id: str
    thread: str | None = None
    reply_to: str | None = None

    def relation(self, *, first: bool) -> dict[str, Any] | None:
        """The `m.relates_to` of a new message: in the thread, the first answering the person's
        message; outside threads the first is a reply (rooms) or plain (DMs, reply_to None)."""
        if self.thread:
            relation: dict[str, Any] = {"rel_type": "m.thread", "event_id": self.thread}
            answered = self.reply_to if first and self.reply_to else self.thread
            relation["is_falling_back"] = not (first and self.reply_to)
            relation["m.in_reply_to"] = {"event_id": answered}
            return relation
        if first and self.reply_to:
            return {"m.in_reply_to": {"event_id": self.reply_to}}
        return None


async def post(
    client: nio.AsyncClient,
    target: Target,
    text: str,
    *,
    first: bool,
    formatted: bool = True,
    tx_id: str | None = None,
) -> str | None:
    """Send one message; its event id, or None when it did not go out (logged). `tx_id`: the
    homeserver returns the event it already made for this transaction id instead of a second."""
    content = message_content(text, formatted=formatted)
    relation = target.relation(first=first)
    if relation is not None:
        content["m.relates_to"] = relation
    content["m.mentions"] = {}  # the model's text never pings anyone
    return await _send(client, target.room_id, content, tx_id)


async def edit(
    client: nio.AsyncClient, room_id: str, event_id: str, text: str, *, formatted: bool
) -> bool | None:
    """Replace a message's text (`m.replace`): True done, False refused for good (deleted, not
    ours), None a passing failure (logged)."""
    new = message_content(text, formatted=formatted)
    new["m.mentions"] = {}
    content = {
        **{key: ("* " + value if key == "body" else value) for key, value in new.items()},
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }
    content.pop("formatted_body", None)
    content.pop("format", None)
    try:
        async with asyncio.timeout(SEND_TIMEOUT):
            response = await client.room_send(room_id, "m.room.message", content)
    except NETWORK_ERRORS as exc:
        log.warning("matrix edit failed room_id=%s error=%r", room_id, exc)
        return None
    if isinstance(response, nio.RoomSendError):
        log.info("matrix message cannot be edited room_id=%s error=%s", room_id, response.message)
        return False if response.status_code in ("M_FORBIDDEN", "M_NOT_FOUND") else None
    return True


async def _send(
    client: nio.AsyncClient, room_id: str, content: dict[str, Any], tx_id: str | None
) -> str | None:
    try:
        async with asyncio.timeout(SEND_TIMEOUT):
            response = await client.room_send(room_id, "m.room.message", content, tx_id=tx_id)
    except NETWORK_ERRORS as exc:
        log.error("matrix send failed room_id=%s error=%r", room_id, exc)
        return None
    if isinstance(response, nio.RoomSendError):
        log.error(
            "matrix send refused room_id=%s status=%s error=%s",
            room_id,
            response.status_code,
            response.message,
        )
        return None
    return str(response.event_id)


class MatrixSurface:
    """A live reply's `Surface` in a Matrix room: no drafts; a message edited with `m.replace`
    (its text as it stands while written, rendered once finished)."""

    def __init__(self, client: nio.AsyncClient, target: Target, pacer: Pacer) -> None:
        self._client = client
        self._target = target
        self._pacer = pacer
        self._room = event_number(target.room_id)  # the pacer's key for the room

    def split(self, text: str) -> list[str]:
        return split_message(text, MESSAGE_LIMIT)

    async def preview(self, text: str) -> bool:
        return False  # Matrix has no drafts

    async def post(self, text: str, *, final: bool, first: bool) -> int | None:
        if not final and not await self._pacer.turn(self._room, wait=False):
            return None  # sent at the next update
        made = await post(self._client, self._target, text, first=first, formatted=final)
        return event_number(made) if made is not None else None

    async def edit(self, message: int, text: str, *, final: bool) -> bool:
        if not await self._pacer.turn(self._room, wait=final):
            return True  # skipped; the next update shows the text as it then stands
        room_id = self._target.room_id
        done = await edit(self._client, room_id, event_id_of(message), text, formatted=final)
        if done is None:
            return not final  # a passing failure: the next update tries again
        return done

    async def delete(self, message: int) -> None:
        try:
            async with asyncio.timeout(SEND_TIMEOUT):
                await self._client.room_redact(self._target.room_id, event_id_of(message))
        except NETWORK_ERRORS as exc:  # gone already, or not ours to redact: it stays
            log.info("matrix could not redact room_id=%s error=%r", self._target.room_id, exc)


def live_reply(
    client: nio.AsyncClient,
    target: Target,
    pacer: Pacer,
    shown: Sequence[int] = (),
    on_shown: Callable[[list[int]], None] | None = None,
) -> LiveReply:
    """A reply streamed to `target` (`shown`, `on_shown`: see `LiveReply`)."""
    return LiveReply(MatrixSurface(client, target, pacer), shown=shown, on_shown=on_shown)
