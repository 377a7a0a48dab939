"""Replies out to Slack: pieces posted as mrkdwn (plain text where Slack refuses it), threads
kept, and the `Surface` of a reply shown while it is written (chat.update, paced).

Part of the Slack adapter, so it may import `slack_sdk`; of ours `channels.base`,
`channels.live` and the adapter's own modules. Rate limits: `Retry-After` is honoured by
`connect.call`; live edits are paced for the whole workspace, as Slack counts chat.update
(tier 3, about 50 a minute) per app and workspace, not per channel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from channels.base import split_message
from channels.live import LiveReply, Pacer
from channels.slack.connect import NETWORK_ERRORS, call, error_code
from channels.slack.events import ts_number, ts_text
from channels.slack.mrkdwn import MARKDOWN_LIMIT, Piece, render_mrkdwn, render_pieces

log = logging.getLogger(__name__)

EDIT_EVERY = 1.2  # seconds between two live edits in the workspace: within tier 3
WORKSPACE = 0  # the pacer's one key: Slack's limit for edits is the app's, not a channel's
# Refusals of the text itself: sent again as plain text. Anything else is not the rendering's.
_TEXT_REFUSED = frozenset({"invalid_blocks", "msg_too_long", "invalid_arguments", "no_text"})
# The message cannot be edited any more: deleted, or not the bot's.
_GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})


class Poster:
    """The Web API calls that put text in a chat: post, edit, delete; failures logged."""

    def __init__(self, web: AsyncWebClient) -> None:
        self._web = web

    async def post(self, channel: str, piece: Piece, thread_ts: str | None) -> str | None:
        """Post `piece`; its ts, or None when it did not go out (logged)."""
        options: dict[str, Any] = {"channel": channel, "thread_ts": thread_ts}
        try:
            try:
                response = await call(self._web.chat_postMessage, text=piece.mrkdwn, **options)
            except SlackApiError as exc:
                if error_code(exc) not in _TEXT_REFUSED or piece.mrkdwn == piece.markdown:
                    raise
                log.warning("slack refused mrkdwn, sending plain error=%s", error_code(exc))
                response = await call(
                    self._web.chat_postMessage, text=piece.markdown, mrkdwn=False, **options
                )
        except NETWORK_ERRORS as exc:
            log.error("slack send failed chat_id=%s error=%s", channel, error_code(exc))
            return None
        return str(response["ts"])

    async def update(self, channel: str, ts: str, text: str) -> bool | None:
        """Replace a message's text: True done, None gone for good (deleted, not ours), False
        a passing failure (logged)."""
        try:
            await call(self._web.chat_update, channel=channel, ts=ts, text=text)
        except NETWORK_ERRORS as exc:
            code = error_code(exc)
            if code in _GONE:
                log.info("slack message cannot be edited chat_id=%s error=%s", channel, code)
                return None
            log.warning("slack edit failed chat_id=%s error=%s", channel, code)
            return False
        return True

    async def delete(self, channel: str, ts: str) -> None:
        try:
            await call(self._web.chat_delete, channel=channel, ts=ts)
        except NETWORK_ERRORS as exc:  # gone already, or not ours to delete: it stays
            log.info("slack could not delete chat_id=%s error=%s", channel, error_code(exc))

    async def send_pieces(self, channel: str, text: str, thread_ts: str | None) -> bool:
        """Post a whole reply; stop at the first piece that fails (the rest would mislead)."""
        for piece in render_pieces(text):
            if await self.post(channel, piece, thread_ts) is None:
                return False
        return True


class SlackSurface:
    """A live reply's `Surface` in a Slack chat: no drafts; a message posted, then edited in
    place (paced across the workspace), in the thread the question was asked in."""

    def __init__(self, poster: Poster, channel: str, thread_ts: str | None, pacer: Pacer) -> None:
        self._poster = poster
        self._channel = channel
        self._thread = thread_ts
        self._pacer = pacer

    def split(self, text: str) -> list[str]:
        return split_message(text, MARKDOWN_LIMIT)

    async def preview(self, text: str) -> bool:
        return False  # Slack has no drafts for bots

    async def post(self, text: str, *, final: bool, first: bool) -> int | None:
        if not final and not await self._pacer.turn(WORKSPACE, wait=False):
            return None  # posted at the next update
        ts = await self._poster.post(self._channel, Piece(text, render_mrkdwn(text)), self._thread)
        return None if ts is None else ts_number(ts)

    async def edit(self, message: int, text: str, *, final: bool) -> bool:
        if not await self._pacer.turn(WORKSPACE, wait=final):
            return True  # skipped; the next update shows the text as it then stands
        done = await self._poster.update(self._channel, ts_text(message), render_mrkdwn(text))
        if done is None:
            return False
        return done or not final  # a passing failure: the next update tries again

    async def delete(self, message: int) -> None:
        await self._poster.delete(self._channel, ts_text(message))


def live_reply(
    poster: Poster,
    channel: str,
    thread_ts: str | None,
    pacer: Pacer,
    shown: Sequence[int] = (),
    on_shown: Callable[[list[int]], None] | None = None,
) -> LiveReply:
    """A reply streamed into `channel` (in `thread_ts` if any); `shown`, `on_shown`: see
    `LiveReply`."""
    surface = SlackSurface(poster, channel, thread_ts, pacer)
    return LiveReply(surface, every=EDIT_EVERY, shown=shown, on_shown=on_shown)
