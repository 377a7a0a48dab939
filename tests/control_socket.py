"""The control socket in tests: served on a real runtime's agent, and one raw exchange with it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gateway.service.app import Runtime
from gateway.service.control import control_server, socket_path
from gateway.tools.jobs import JobTools

UTC = ZoneInfo("UTC")


async def exchange(path: Path, raw: bytes) -> dict[str, Any]:
    """Write `raw` as it is and read the one answer line."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(raw)
        with suppress(ConnectionError):  # the server may answer and close before taking it all
            await writer.drain()
        async with asyncio.timeout(10):
            line = await reader.readline()
    finally:
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()
    answer: dict[str, Any] = json.loads(line)
    return answer


@asynccontextmanager
async def serving(runtime: Runtime, idle_timeout: float = 10.0) -> AsyncIterator[Path]:
    """The service's control socket on the real agent, its owed answers and its jobs op."""
    path = socket_path(runtime.config.state_dir)
    jobs = {"jobs": JobTools(runtime.scheduler, UTC).control_op}
    agent = runtime.agent
    async with control_server(
        path, agent.handle, dict, owed=agent.owed, ops=jobs, idle_timeout=idle_timeout
    ):
        yield path


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    """No log record carries a traceback."""
    traced = [r.getMessage() for r in caplog.records if r.exc_info]
    assert traced == []
