"""The control socket: how `memgate chat` and `memgate status` reach a running `memgate run`.

A Unix socket at `STATE_DIR/control.sock`, owner-only (0600 in a 0700 folder), speaking JSON lines:
one request object per connection, one answer object back.

    {"op": "chat", "text": "...", "session": "terminal:local", "sender": "alice"}
        -> {"text": "...", "failed": false}
    {"op": "status"} -> {"channels": {"telegram": true}, "queue": 0, "uptime": 12.5}
    {"op": "owed", "session": "terminal:local"} -> {"texts": ["..."]}

`owed` hands over the session's answers a restart kept from the terminal (stored, never shown);
once written to the socket they count as delivered.
    {"op": "jobs", "action": "remove", "id": "a1b2c3"} -> {"ok": true, "text": "..."}

A chat request goes through the service's own agent, so the terminal shares its memory and its
session files; the agent's `/stop` ends a held answer from another connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from gateway.bus import Handler, InboundMessage, OutboundMessage, ReplyStream
from memory.fileio import ensure_private_dir

log = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
MAX_REQUEST = 1024 * 1024  # one message of text, with room to spare
CONNECT_TIMEOUT = 2.0  # seconds; the socket is local, an answer this slow means no service


# The agent's owed answers of a session: (channel, chat_id, session key) -> replies.
Owed = Callable[[str, str, str], Awaitable[list[OutboundMessage]]]
Operation = Callable[[dict[str, Any]], dict[str, Any]]
"""A further op (e.g. `jobs`): the request in, the answer out; it runs on the service's loop."""


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


@asynccontextmanager
async def control_server(
    path: Path,
    handler: Handler,
    status: Callable[[], dict[str, Any]],
    *,
    owed: Owed | None = None,
    ops: Mapping[str, Operation] | None = None,
) -> AsyncIterator[None]:
    """Serve the control socket at `path` while the block runs; the file is removed after."""
    ensure_private_dir(path.parent)
    # The caller holds the workspace lock, so a socket file left here is a dead process's.
    _remove(path)
    started = time.monotonic()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            answer, replies = await _answer(line, handler, status, started, owed, ops or {})
            writer.write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
            await writer.drain()
            for reply in replies:
                await reply.sent()  # handed to the terminal: no longer owed
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the terminal went away; its /stop (if any) arrives on its own connection
        finally:
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_unix_server(serve, path=str(path), limit=MAX_REQUEST)
    os.chmod(path, 0o600)
    log.info("control socket listening path=%s", path)
    try:
        yield
    finally:
        server.close()
        await server.wait_closed()
        _remove(path)


def _remove(path: Path) -> None:
    with suppress(FileNotFoundError):
        path.unlink()


async def _answer(
    line: bytes,
    handler: Handler,
    status: Callable[[], dict[str, Any]],
    started: float,
    owed: Owed | None = None,
    ops: Mapping[str, Operation] | None = None,
) -> tuple[dict[str, Any], list[OutboundMessage]]:
    """The answer to one request, and the replies it carries (to mark sent once written)."""
    try:
        request = json.loads(line)
        op = request["op"]
    except (ValueError, KeyError, TypeError):
        return {"error": "not a control request (one JSON object with an op, per line)"}, []
    if op == "status":
        return {**status(), "uptime": round(time.monotonic() - started, 1)}, []
    if op == "owed" and owed is not None:
        key = str(request.get("session") or "terminal:local")
        replies = await owed("terminal", "local", key)
        return {"texts": [reply.text for reply in replies]}, replies
    if isinstance(op, str) and ops and op in ops:
        return ops[op](request), []
    if op == "chat" and isinstance(request.get("text"), str):
        sender = str(request.get("sender") or "local")
        message = InboundMessage(
            channel="terminal",
            chat_id="local",
            sender_id=sender,
            sender_name=sender,
            # Only the owner can open the socket (0600 in a 0700 folder): the private scope.
            sender_is_owner=True,
            text=request["text"],
            session_key=request.get("session") or None,
        )
        reply = await handler(message)
        answer = {"text": reply.text if reply else "", "failed": bool(reply and reply.failed)}
        return answer, [reply] if reply is not None else []
    return {"error": f"unknown op {op!r}"}, []


async def request(path: Path, payload: dict[str, Any]) -> dict[str, Any] | None:
    """Send one request; None when no service listens there (no socket, or a dead one)."""
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_REQUEST)
    except (FileNotFoundError, ConnectionRefusedError, PermissionError, TimeoutError):
        # PermissionError: another user's service; this process cannot attach to it.
        return None
    try:
        writer.write(json.dumps(payload, ensure_ascii=False).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()
    if not line:
        return None
    answer: dict[str, Any] = json.loads(line)
    return answer


def remote_handler(path: Path) -> Handler:
    """A `Handler` that sends each message to the running service's agent."""

    async def handle(
        message: InboundMessage, stream: ReplyStream | None = None
    ) -> OutboundMessage | None:
        # The socket carries whole answers: a terminal attached to the service shows each at once.
        answer = await request(
            path,
            {
                "op": "chat",
                "text": message.text,
                "session": message.session_key,
                "sender": message.sender_id,
            },
        )
        if answer is None:
            text = "The service stopped while answering; the message is kept in the session."
            return OutboundMessage(message.channel, message.chat_id, text, failed=True)
        if "error" in answer:
            return OutboundMessage(message.channel, message.chat_id, answer["error"], failed=True)
        if not answer.get("text"):
            return None
        return OutboundMessage(
            message.channel, message.chat_id, answer["text"], failed=bool(answer.get("failed"))
        )

    return handle


async def is_serving(path: Path) -> bool:
    """True when a running service answers on the socket."""
    return await request(path, {"op": "status"}) is not None
