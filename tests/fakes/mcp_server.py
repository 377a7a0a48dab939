"""A small MCP server written with the official `mcp` SDK, for tests and for trying memgate out.

`python -m tests.fakes.mcp_server stdio` serves it on stdin/stdout; `... http --port N` serves it
over streamable HTTP on 127.0.0.1:N at /mcp (N=0: a free port, named on stdout). Its tools:
`add`, `sleep` (outlives a short timeout), `shout` (a long text), `picture` (an image block),
`crash` (the process exits mid-call) and `whoami` (echoes the request's headers or environment,
to check what memgate passes on).
Each start appends a line to the file named by `$FAKE_MCP_STARTS`, so a test can wait for a restart.
With `$FAKE_MCP_GATE` set, the server says nothing until that file exists: a server slow to start.
With `$FAKE_MCP_NOTES` set, it appends to that file `pid N` at start, `stdin closed` when its stdin
ends and `exited` as it exits, after `$FAKE_MCP_LINGER` seconds (a server with work to finish).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent

server = MCPServer("demo")

# A 1x1 transparent PNG.
_PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
async def sleep(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def shout(times: int) -> str:
    """Repeat a word many times: a result longer than memgate keeps."""
    return "WORD " * times


@server.tool()
def picture() -> list[object]:
    """An image and a caption."""
    return [
        ImageContent(type="image", data=base64.b64encode(_PIXEL).decode(), mime_type="image/png"),
        "a pixel",
    ]


@server.tool()
def crash() -> str:
    """Exit the server process at once, as a crash would."""
    os._exit(3)


@server.tool()
def whoami(ctx: Context) -> str:
    """The environment variable FAKE_MCP_SECRET (stdio) or the Authorization header (HTTP)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    if headers is not None:
        return str(headers.get("authorization", ""))
    return os.environ.get("FAKE_MCP_SECRET", "")


def stdio_server(**extra: object) -> dict[str, object]:
    """A `tools.mcp_servers` entry that runs this server over stdio with this interpreter."""
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", "stdio"], **extra}


@asynccontextmanager
async def serve_http() -> AsyncIterator[str]:
    """Run this server over streamable HTTP on a port of its own; yields its URL once it listens.

    The child binds port 0 and says which port it got, so no other process can take the port
    between its choice and the bind.
    """
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakes.mcp_server",
        "http",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        async with asyncio.timeout(20):
            line = await process.stdout.readline()  # "serving on 127.0.0.1:PORT", once it listens
        if not line.startswith(b"serving on "):
            raise RuntimeError("the fake MCP server exited at start")
        yield f"http://{line.decode().split()[-1]}/mcp"
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


def _note(text: str) -> None:
    notes = os.environ.get("FAKE_MCP_NOTES")
    if notes:
        with Path(notes).open("a", encoding="utf-8") as handle:
            handle.write(f"{text}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--port", type=int, default=8931)
    args = parser.parse_args()
    starts = os.environ.get("FAKE_MCP_STARTS")
    if starts:
        with Path(starts).open("a", encoding="utf-8") as handle:
            handle.write(f"{os.getpid()}\n")
    gate, parent = os.environ.get("FAKE_MCP_GATE"), os.getppid()
    while gate and not Path(gate).exists():
        if os.getppid() != parent:  # memgate is gone without stopping us: do not linger
            sys.exit(1)
        time.sleep(0.05)  # another process opens the gate: nothing to wait on but the file
    _note(f"pid {os.getpid()}")
    if args.transport == "stdio":
        server.run("stdio")
        _note("stdin closed")
        time.sleep(float(os.environ.get("FAKE_MCP_LINGER", "0")))
        _note("exited")
        return
    import uvicorn  # the web server only for HTTP: a stdio start stays quick

    # Bound here rather than by uvicorn, so that with --port 0 the line can name the port.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen()
    print(f"serving on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])


if __name__ == "__main__":
    main()
