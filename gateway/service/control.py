"""The control socket: how `memgate chat` and `memgate status` reach a running `memgate run`.

A Unix socket at `STATE_DIR/control.sock`, owner-only (0600 in a 0700 folder), speaking JSON lines:
one request object per connection, one answer object back.

    {"op": "chat", "text": "...", "session": "terminal:local", "sender": "alice"}
        -> {"text": "...", "failed": false}
    {"op": "chat", "text": "...", "stream": "on"}
        -> {"delta": "You "} {"status": "reading notes.md…"} {"delta": "like"} ... {"text": ...}
    {"op": "status"} -> {"channels": {"telegram": true}, "queue": 0, "uptime": 12.5}
    {"op": "owed", "session": "terminal:local"} -> {"texts": ["..."]}
    {"op": "jobs", "action": "remove", "id": "a1b2c3"} -> {"ok": true, "text": "..."}

With `"stream": "on"` the answer is written as it grows: `delta` lines (text added) and `status`
lines (a tool step runs; the next delta starts anew), then the usual answer line, always the last.

`owed` hands over the session's answers a restart kept from the terminal (stored, never shown);
once written to the socket they count as delivered. Every field is checked before anything runs
(`FIELDS`); a bad request, a line over `MAX_REQUEST` bytes or no request within the idle timeout
gets `{"error": "..."}` naming what is wrong, and the connection is closed.

A chat request goes through the service's own agent, so the terminal shares its memory and its
session files; the agent's `/stop` ends a held answer from another connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from gateway.bus import Handler, InboundMessage, OutboundMessage, ReplyStream
from memory.fileio import ensure_private_dir

log = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
MAX_REQUEST = 1024 * 1024  # one message of text, with room to spare
CONNECT_TIMEOUT = 2.0  # seconds; the socket is local, an answer this slow means no service
# Seconds a client has to send its request line, and to take the answer: our clients write at once,
# so a connection quiet this long is stuck or not ours, and would otherwise be held forever.
IDLE_TIMEOUT = 10.0

# The fields each op may carry besides "op", and whether it must: all are strings, and null stands
# for a field not given. Anything else is refused before the op runs.
FIELDS: dict[str, dict[str, bool]] = {
    "status": {},
    "owed": {"session": False},
    "chat": {"text": True, "session": False, "sender": False, "stream": False},
    "jobs": {"action": True, "id": False},
}

# Fields that take one of a few words, whatever the op.
CHOICES: dict[str, tuple[str, ...]] = {"stream": ("on",)}
# Streamed pieces a client has not taken yet, in bytes, past which further pieces are dropped
# (the answer line still comes whole): a stalled client must not grow the service's memory.
MAX_UNSENT = 4 * MAX_REQUEST


# The agent's owed answers of a session: (channel, chat_id, session key) -> replies.
Owed = Callable[[str, str, str], Awaitable[list[OutboundMessage]]]
Operation = Callable[[dict[str, Any]], dict[str, Any]]
"""A further op (e.g. `jobs`): the request in, the answer out; it runs on the service's loop."""
# An answer line, and the replies it carries (marked sent once the line is written).
Answer = tuple[dict[str, Any], list[OutboundMessage]]


class RequestError(ValueError):
    """A control request the service refuses; the message is the client's error line."""


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
    idle_timeout: float = IDLE_TIMEOUT,
) -> AsyncIterator[None]:
    """Serve the control socket at `path` while the block runs; the file is removed after."""
    ops = ops or {}
    unchecked = set(ops) - set(FIELDS)
    if unchecked:
        raise ValueError(f"control ops without FIELDS: {sorted(unchecked)}")
    served = {"status", "chat", *ops} | ({"owed"} if owed is not None else set())
    ensure_private_dir(path.parent)
    # The caller holds the workspace lock, so a socket file left here is a dead process's.
    _remove(path)
    started = time.monotonic()

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Answer | None:
        try:
            request = await _read_request(reader, served, idle_timeout)
        except RequestError as exc:
            # The client's mistake, not the service's: one line, no traceback.
            log.info("control request refused error=%s", exc)
            return {"error": str(exc)}, []
        if request is None:
            return None  # connected and left without a word
        pieces = _SocketStream(writer) if request.get("stream") == "on" else None
        return await _answer(request, handler, status, started, owed, ops, pieces)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            answered = await respond(reader, writer)
            if answered is None:
                return
            answer, replies = answered
            try:
                async with asyncio.timeout(idle_timeout):
                    writer.write(json.dumps(answer, ensure_ascii=False).encode() + b"\n")
                    await writer.drain()
            except TimeoutError:
                # Its replies stay owed: the terminal's next start prints them.
                log.info("control client took no answer within %ss; closed", idle_timeout)
                return
            for reply in replies:
                await reply.sent()  # handed to the terminal: no longer owed
        except ConnectionError:
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


async def _read_request(
    reader: asyncio.StreamReader, served: Collection[str], idle_timeout: float
) -> dict[str, Any] | None:
    """The client's one request, checked; None when it closed without sending anything."""
    try:
        async with asyncio.timeout(idle_timeout):
            line = await reader.readline()
    except TimeoutError as exc:
        raise RequestError(f"no request line within {idle_timeout:g}s") from exc
    except ValueError as exc:  # the reader's limit: no newline within MAX_REQUEST bytes
        raise RequestError(_too_long()) from exc
    return parse_request(line, served) if line else None


def parse_request(line: bytes, served: Collection[str] = tuple(FIELDS)) -> dict[str, Any]:
    """The request on `line` with every field checked against `FIELDS`; `RequestError` names the
    first field at fault."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError) as exc:
        # ValueError: not JSON, or not UTF-8; RecursionError: nested deeper than the parser goes.
        raise RequestError("not JSON: send one JSON object on one line") from exc
    if not isinstance(request, dict):
        raise RequestError(f"a request is a JSON object, not {_json_type(request)}")
    op = request.get("op")
    if op is None:
        raise RequestError("op is required")
    if not isinstance(op, str):
        raise RequestError(f"op must be a string, not {_json_type(op)}")
    if op not in served or op not in FIELDS:
        raise RequestError(f"unknown op {_shown(op)}")
    fields = FIELDS[op]
    for name, value in request.items():
        if name != "op" and name not in fields:
            raise RequestError(f"{op}: unknown field {_shown(name)}")
        if value is not None and not isinstance(value, str):
            raise RequestError(f"{op}: {name} must be a string, not {_json_type(value)}")
        if value is not None and name in CHOICES and value not in CHOICES[name]:
            words = " or ".join(map(repr, CHOICES[name]))
            raise RequestError(f"{op}: {name} must be {words}, not {_shown(value)}")
    for name, required in fields.items():
        if required and request.get(name) is None:
            raise RequestError(f"{op}: {name} is required")
    return request


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _shown(text: str) -> str:
    """A client's string in an error line, cut short: the line and the log stay one line."""
    return repr(text if len(text) <= 40 else text[:40] + "…")


def _too_long() -> str:
    return f"request over {MAX_REQUEST / 2**20:g} MiB, the control socket's limit for one line"


async def _answer(
    request: dict[str, Any],
    handler: Handler,
    status: Callable[[], dict[str, Any]],
    started: float,
    owed: Owed | None,
    ops: Mapping[str, Operation],
    pieces: ReplyStream | None = None,
) -> Answer:
    """The answer to a checked request of an op served here."""
    op = request["op"]
    if op == "status":
        return {**status(), "uptime": round(time.monotonic() - started, 1)}, []
    if op == "owed" and owed is not None:
        key = request.get("session") or "terminal:local"
        replies = await owed("terminal", "local", key)
        return {"texts": [reply.text for reply in replies]}, replies
    if op == "chat":
        sender = request.get("sender") or "local"
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
        reply = await handler(message, stream=pieces)
        text = reply.text_with_commands() if reply else ""  # a terminal shows no buttons
        answer = {"text": text, "failed": bool(reply and reply.failed)}
        return answer, [reply] if reply is not None else []
    return ops[op](request), []


class _SocketStream:
    """The agent's `ReplyStream` for a client that asked for pieces: each one a JSON line.

    It never waits for the client (the model's stream waits on it): lines go to the transport's
    buffer, and the answer line's write, under the idle timeout, waits for them all. Once the
    client leaves or stops reading, pieces are dropped; the answer line still says it all.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._send({"delta": text})

    async def status(self, note: str) -> None:
        self._send({"status": note})

    def _send(self, piece: dict[str, str]) -> None:
        if self._writer.is_closing():
            return
        if self._writer.transport.get_write_buffer_size() > MAX_UNSENT:
            return
        self._writer.write(json.dumps(piece, ensure_ascii=False).encode() + b"\n")


async def request(
    path: Path, payload: dict[str, Any], pieces: ReplyStream | None = None
) -> dict[str, Any] | None:
    """Send one request; None when no service listens there (no socket, or a dead one).

    With `pieces`, a chat request asks for the answer as it grows and hands each piece to it;
    the answer line is returned as before."""
    if pieces is not None:
        payload = {**payload, "stream": "on"}
    line = json.dumps(payload, ensure_ascii=False).encode() + b"\n"
    if len(line) - 1 > MAX_REQUEST:
        return {"error": _too_long()}  # what the service would answer, without sending it
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            reader, writer = await asyncio.open_unix_connection(str(path), limit=MAX_REQUEST)
    except (FileNotFoundError, ConnectionRefusedError, PermissionError, TimeoutError):
        # PermissionError: another user's service; this process cannot attach to it.
        return None
    try:
        writer.write(line)
        await writer.drain()
        line = await reader.readline()
        while pieces is not None and line:
            piece = json.loads(line)
            if "delta" in piece:
                await pieces.write(piece["delta"])
            elif "status" in piece:
                await pieces.status(piece["status"])
            else:
                break  # the answer line
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
        # Streamed as in this process: the service sends the pieces as its agent writes them.
        answer = await request(
            path,
            {
                "op": "chat",
                "text": message.text,
                "session": message.session_key,
                "sender": message.sender_id,
            },
            stream,
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
