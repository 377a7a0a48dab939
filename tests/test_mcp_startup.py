"""MCP off the critical path: tools remembered from the last start, servers connecting behind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.service.app import Runtime, open_runtime
from gateway.service.run import release_mcp
from gateway.tools.mcp.servers import STARTING, UP, McpServers
from tests.conftest import RuntimeFactory, build_config, inbound
from tests.fakes.llm import FakeLLM, text, tool_call
from tests.fakes.mcp_server import stdio_server

pytestmark = pytest.mark.timeout(90)


def servers(**entries: dict[str, Any]) -> dict[str, Any]:
    return {"tools": {"mcp_servers": entries}}


def gated(gate: Path, **extra: Any) -> dict[str, Any]:
    """The fake server, silent until `gate` exists (a server slow to start)."""
    env = {"FAKE_MCP_GATE": str(gate), **extra.pop("env", {})}
    return stdio_server(env=env, start_timeout=10, **extra)


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def mcp_of(runtime: Runtime) -> McpServers:
    assert runtime.mcp is not None
    return runtime.mcp


async def remember(make_runtime: RuntimeFactory, config: dict[str, Any]) -> None:
    """A first run on the workspace: every server connects, so its tools are remembered."""
    async with make_runtime(config) as runtime:
        async with asyncio.timeout(30):
            for connection in mcp_of(runtime).connections:
                await connection.wait_for(UP)


async def test_a_remembered_tool_waits_for_its_server_then_works(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """The runtime is ready before the server answers; a call to its tool waits, then works."""
    gate = tmp_path / "gate"
    gate.touch()
    config = servers(demo=gated(gate))
    await remember(make_runtime, config)
    gate.unlink()
    async with make_runtime(config) as runtime:
        connection = mcp_of(runtime).connection("demo")
        assert connection.state == STARTING  # ready while the server is still silent
        fake_llm.push(tool_call("demo__add", {"a": 2, "b": 40}, call_id="c1"))
        fake_llm.push(text("It is 42."))
        turn = asyncio.create_task(runtime.agent.handle(inbound("add 2 and 40")))
        await fake_llm.wait_for_requests(1, "chat", within=20)
        assert "demo__add" in offered(fake_llm.chat_requests()[-1])
        assert not turn.done() and connection.state == STARTING
        gate.touch()
        async with asyncio.timeout(30):
            reply = await turn
        assert reply is not None and reply.text == "It is 42."
        assert tool_results(fake_llm.chat_requests()[-1]) == ["42"]


async def test_a_changed_config_does_not_offer_the_old_tools(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A server whose config changed offers nothing until it connects; an unchanged one at once."""
    gate = tmp_path / "gate"
    gate.touch()
    before = servers(
        same=gated(gate, allow=["add"]),
        changed=gated(gate, allow=["add"], env={"FAKE_MCP_SECRET": "cache-secret-77"}),
    )
    await remember(make_runtime, before)
    cache = (tmp_path / "state" / "mcp-tools.json").read_text(encoding="utf-8")
    assert "cache-secret-77" not in cache
    gate.unlink()
    after = servers(
        same=gated(gate, allow=["add"]),
        changed=gated(gate, allow=["shout"], env={"FAKE_MCP_SECRET": "cache-secret-77"}),
    )
    async with make_runtime(after) as runtime:
        assert mcp_of(runtime).connection("changed").state == STARTING
        await runtime.agent.handle(inbound("hi"))
        early = [n for n in offered(fake_llm.chat_requests()[-1]) if "__" in n]
        assert early == ["same__add"]
        gate.touch()
        async with asyncio.timeout(30):
            for connection in mcp_of(runtime).connections:
                await connection.wait_for(UP)
        await runtime.agent.handle(inbound("again"))
        late = [n for n in offered(fake_llm.chat_requests()[-1]) if "__" in n]
        assert sorted(late) == ["changed__shout", "same__add"]


async def test_a_server_that_never_connects_answers_unavailable_after_its_timeout(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A remembered tool whose server stays silent answers 'unavailable' once start_timeout passes."""
    gate = tmp_path / "gate"
    gate.touch()
    config = servers(demo=gated(gate))
    config["tools"]["mcp_servers"]["demo"]["start_timeout"] = 5
    await remember(make_runtime, config)
    gate.unlink()
    async with make_runtime(config) as runtime:
        fake_llm.push(tool_call("demo__add", {"a": 1, "b": 1}, call_id="c1"))
        fake_llm.push(text("no luck"))
        async with asyncio.timeout(30):
            reply = await runtime.agent.handle(inbound("add"))
        assert reply is not None and reply.text == "no luck"
        [result] = tool_results(fake_llm.chat_requests()[-1])
        assert result.startswith("Error: the MCP server 'demo' is unavailable right now")
        assert "no answer within 5 s" in result


async def test_held_servers_start_only_once_no_message_is_being_answered(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """memgate run lets its MCP servers start after the answer in progress, not during it."""
    config = build_config(tmp_path / "workspace", fake_llm.url, servers(demo=stdio_server()))
    async with open_runtime(config, mcp_held=True) as runtime:
        hold = asyncio.Event()
        fake_llm.push(text("hello"), hold=hold)
        turn = asyncio.create_task(runtime.agent.handle(inbound("hi")))
        await fake_llm.wait_for_requests(1, "chat", within=20)
        release = asyncio.create_task(release_mcp(mcp_of(runtime), [], runtime.agent.activity))
        for _ in range(20):  # let the release task run as far as it can
            await asyncio.sleep(0)
        assert not release.done() and not mcp_of(runtime).released
        hold.set()
        async with asyncio.timeout(30):
            await turn
            await release
        assert mcp_of(runtime).released


async def test_a_call_to_a_held_server_lets_it_start(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A remembered tool called before the servers are released starts them and works."""
    config = servers(demo=stdio_server(start_timeout=10))
    await remember(make_runtime, config)
    built = build_config(tmp_path / "workspace", fake_llm.url, config)
    async with open_runtime(built, mcp_held=True) as runtime:
        assert not mcp_of(runtime).released
        fake_llm.push(tool_call("demo__add", {"a": 2, "b": 40}, call_id="c1"))
        fake_llm.push(text("It is 42."))
        async with asyncio.timeout(30):
            reply = await runtime.agent.handle(inbound("add 2 and 40"))
        assert reply is not None and reply.text == "It is 42."
        assert tool_results(fake_llm.chat_requests()[-1]) == ["42"]
