"""A turn's model call: plain, or with a `ReplyStream` streamed so the answer shows as written.

On /stop a streamed call returns the part written so far with its "(stopped)" mark, for the turn to
store; it stores nothing itself. Imports only `gateway.bus`, `gateway.llm.types` and the turn's notes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Container
from typing import Any

from gateway.agent.turn_notes import RESTART_NOTE, mark_stopped
from gateway.bus import ReplyStream
from gateway.llm.types import ChatProvider, ChatResponse


async def ask_model(
    provider: ChatProvider,
    request: list[dict[str, Any]],
    schemas: list[dict[str, Any]],
    stream: ReplyStream | None,
    stopped: Container[asyncio.Task[Any]],  # the turns /stop cancelled
) -> ChatResponse | str:
    """The model's response; a str only for a streamed call /stop cut: the text shown, marked.

    Cancelled any other way (shutdown), it stays cancelled: the user message is answered again at
    the next start, as for a turn that was not streamed.
    """
    if stream is None:
        return await provider.chat(request, schemas)
    written: list[str] = []

    async def write(piece: str) -> None:
        written.append(piece)
        await stream.write(piece)

    async def restart() -> None:
        # The text shown was cut off, not finished: a note stands in for it until the
        # answer, asked again, is written anew (and /stop keeps only the new text).
        written.clear()
        await stream.status(RESTART_NOTE)

    try:
        return await provider.stream_chat(request, schemas, on_text=write, on_restart=restart)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        partial = "".join(written).strip()
        if task is None or task not in stopped or not partial:
            raise
        task.uncancel()  # this cancellation was /stop's, and is answered here
    return mark_stopped(partial)
