"""Stopping stdio MCP servers: bounded whatever the server does, at once for a server never used."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.service.app import Runtime
from gateway.tools.mcp.servers import UP, McpServers
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, text, tool_call
from tests.fakes.mcp_server import stdio_server
from tests.fakes.mcp_silent import silent_server

pytestmark = pytest.mark.timeout(90)


def servers(**entries: dict[str, Any]) -> dict[str, Any]:
    return {"tools": {"mcp_servers": entries}}


def mcp_of(runtime: Runtime) -> McpServers:
    assert runtime.mcp is not None
    return runtime.mcp


def notes(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def pid_of(path: Path) -> int:
    return int(next(n for n in notes(path) if n.startswith("pid ")).split()[1])


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def until(condition: Callable[[], bool], within: float = 30) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (files and processes: nothing to wait on)
            await asyncio.sleep(0.02)


async def test_a_stop_while_a_silent_server_is_being_ended_is_bounded(
    make_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    """Stopping just after a silent server's start timed out ends, and leaves no process behind."""
    log = tmp_path / "silent.txt"
    async with asyncio.timeout(60):
        async with make_runtime(servers(silent=silent_server(log, start_timeout=1))):
            # Its stdin closed: the start timed out and the server is being ended.
            await until(lambda: "stdin closed" in notes(log))
    pid = pid_of(log)
    await until(lambda: not alive(pid), within=10)


async def test_an_unused_server_is_stopped_at_once_a_used_one_gets_time_to_finish(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """At stop a server whose tool ran may finish its work; one never called is ended at once."""
    used, idle = tmp_path / "used.txt", tmp_path / "idle.txt"
    config = servers(
        used=stdio_server(env={"FAKE_MCP_NOTES": str(used), "FAKE_MCP_LINGER": "1"}),
        idle=stdio_server(env={"FAKE_MCP_NOTES": str(idle), "FAKE_MCP_LINGER": "1"}),
    )
    async with make_runtime(config) as runtime:
        async with asyncio.timeout(60):
            for connection in mcp_of(runtime).connections:
                await connection.wait_for(UP)
        fake_llm.push(tool_call("used__add", {"a": 1, "b": 2}, call_id="c1"))
        fake_llm.push(text("3"))
        reply = await runtime.agent.handle(inbound("add"))
        assert reply is not None and reply.text == "3"
    assert notes(used)[-2:] == ["stdin closed", "exited"]
    assert "exited" not in notes(idle)
    assert not alive(pid_of(idle)) and not alive(pid_of(used))
