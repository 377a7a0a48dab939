"""The worst stdio MCP server a stop has to end: it never answers, ignores its stdin closing and
SIGTERM, and dies only of SIGKILL (or when its parent is gone, so a test cannot leak it).

Standard library only, so it is running within milliseconds (the SDK's import takes seconds on a
busy machine). It appends `pid N`, `stdin closed` and each `SIGTERM` to the file named by
`$FAKE_MCP_NOTES`. `silent_server()` is its `tools.mcp_servers` entry.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def silent_server(notes: Path, **extra: Any) -> dict[str, Any]:
    """A `tools.mcp_servers` entry that runs this server, noting into `notes`."""
    env = {"FAKE_MCP_NOTES": str(notes), **extra.pop("env", {})}
    here = str(Path(__file__).resolve().parents[2])
    return {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_silent"],
        "cwd": here,
        "env": env,
        **extra,
    }


def _note(text: str) -> None:
    with Path(os.environ["FAKE_MCP_NOTES"]).open("a", encoding="utf-8") as handle:
        handle.write(f"{text}\n")


def main() -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: _note("SIGTERM"))
    _note(f"pid {os.getpid()}")
    while os.read(sys.stdin.fileno(), 65536):
        pass  # reads every request and answers none
    _note("stdin closed")
    parent, deadline = os.getppid(), time.monotonic() + 120
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.05)  # deaf to everything but SIGKILL, or its parent's end


if __name__ == "__main__":
    main()
