"""The stdio transport of MCP servers: memgate spawns each server and ends its process itself.

Not the SDK's `stdio_client`, for two reasons. It ends a server inside a cancellation shield that
a second cancel breaks (a stop while a failed start was still being wound down): its reader was
then left draining the live server's stdout, and the stop waited for the server to exit on its own,
forever for one that never does. And it gives every server 2 s to exit after its stdin closes, so
`memgate chat -m` waited that long at exit for servers it never used. Here no wait is shielded,
each is bounded, a cancel kills the server's process group at once, and a server none of whose
tools was called is told to stop at once (`grace` is 0 until a call raises it).

Imported by gateway/tools/mcp/client.py only; nothing of memgate's beyond the SDK's message types.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from mcp.types import jsonrpc_message_adapter

log = logging.getLogger(__name__)

USED_GRACE = 2.0  # seconds a server that ran a tool has to exit on its own once its stdin closes
TERM_WAIT = 1.0  # seconds to exit after SIGTERM before SIGKILL
KILL_WAIT = 1.0  # seconds for the event loop to see a killed process go
_EXIT_POLL = 0.01  # not `process.wait()`: it also waits for EOF on pipes a grandchild may hold
_READ_SIZE = 65_536

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


class StdioTransport:
    """One stdio server: `open()` spawns it in a process group of its own and yields the
    session's streams; leaving `open()` closes its stdin and ends the process (see `end`)."""

    def __init__(
        self,
        command: str,
        args: list[str],
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> None:
        self.command = command
        self.args = args
        self.env = get_default_environment() | (env or {})
        self.cwd = cwd
        self.grace = 0.0  # raised to USED_GRACE by the first tool call
        self.pid: int | None = None

    def used(self) -> None:
        """A tool of it has been called: it may have work to finish when its stdin closes."""
        self.grace = USED_GRACE

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Streams]:
        process = await asyncio.create_subprocess_exec(
            self.command,
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=sys.stderr,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own group: SIGTERM and SIGKILL reach its children too
        )
        self.pid = process.pid
        read_sink, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_source = anyio.create_memory_object_stream[SessionMessage](0)
        try:
            async with anyio.create_task_group() as pumps:
                pumps.start_soon(_read, process, read_sink)
                pumps.start_soon(_write, process, write_source, read_sink)
                try:
                    yield read_stream, write_stream
                finally:
                    pumps.cancel_scope.cancel()
        finally:
            read_stream.close()
            write_stream.close()
            await self.end(process)

    async def end(self, process: asyncio.subprocess.Process) -> None:
        """Close stdin, give the server `grace` s to exit, then SIGTERM its group and after
        TERM_WAIT SIGKILL it. Cancelled on the way (a stop), the group is killed at once: no
        stop waits on a server."""
        try:
            if process.stdin is not None:
                process.stdin.close()
            if not await _exited(process, self.grace):
                _signal_group(process.pid, signal.SIGTERM)
                if not await _exited(process, TERM_WAIT):
                    _signal_group(process.pid, signal.SIGKILL)
        except asyncio.CancelledError:
            _signal_group(process.pid, signal.SIGKILL)
            await _reaped(process)
            raise
        await _reaped(process)


async def _read(
    process: asyncio.subprocess.Process, sink: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    """The server's stdout, one JSON-RPC message a line, into the session's read stream."""
    assert process.stdout is not None
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    buffer = ""
    with sink, suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        while chunk := await process.stdout.read(_READ_SIZE):
            lines = (buffer + decoder.decode(chunk)).split("\n")
            buffer = lines.pop()
            for line in lines:
                if line.strip():
                    await sink.send(_parse(line))
    # Ending here closes the read stream: the session sees the connection end.


async def _write(
    process: asyncio.subprocess.Process,
    source: MemoryObjectReceiveStream[SessionMessage],
    read_sink: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    """The session's messages onto the server's stdin, one line each."""
    assert process.stdin is not None
    with source:
        try:
            async for message in source:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                process.stdin.write(data.encode("utf-8") + b"\n")
                await process.stdin.drain()
        except (ConnectionError, OSError):
            # The server stopped reading: a request must not wait for an answer that cannot come.
            read_sink.close()


def _parse(line: str) -> SessionMessage | Exception:
    """A line as a message, or the error the session reports for it."""
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        log.warning("mcp server wrote a line that is not JSON-RPC error=%s", str(exc)[:200])
        return exc


async def _exited(process: asyncio.subprocess.Process, within: float) -> bool:
    """Whether the process has exited, waiting up to `within` seconds for it."""
    if process.returncode is None and within > 0:
        with suppress(TimeoutError):
            async with asyncio.timeout(within):
                while process.returncode is None:  # noqa: ASYNC110 (see _EXIT_POLL)
                    await asyncio.sleep(_EXIT_POLL)
    return process.returncode is not None


async def _reaped(process: asyncio.subprocess.Process) -> None:
    """Wait, bounded, for the event loop to see the (exited or killed) process go and close its
    pipes: a loop that ends first leaves the transport open."""
    try:
        async with asyncio.timeout(KILL_WAIT):
            await process.wait()
    except TimeoutError:
        log.warning("mcp server process outlived SIGKILL or holds its pipes pid=%d", process.pid)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the server's process group (its pid: it leads its own session)."""
    with suppress(ProcessLookupError, PermissionError):  # gone already, or not ours to signal
        os.killpg(pid, sig)
