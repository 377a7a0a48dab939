"""Tools from MCP servers: the real `mcp` SDK against tests/fakes/mcp_server.py, over stdio and HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mcp.types import Tool as McpTool

from gateway.service.app import Runtime
from gateway.tools.mcp.servers import RESTARTING, UP, McpServers, offered_tools
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, text, tool_call
from tests.fakes.mcp_server import serve_http, stdio_server

pytestmark = pytest.mark.timeout(90)


def servers(**entries: dict[str, Any]) -> dict[str, Any]:
    return {"tools": {"mcp_servers": entries}}


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def stored_tool_results(runtime: Runtime, key: str = "test:42") -> list[str]:
    lines = runtime.sessions.path_for(key).read_text(encoding="utf-8").splitlines()
    return [json.loads(x)["content"] for x in lines if json.loads(x).get("role") == "tool"]


def mcp_of(runtime: Runtime) -> McpServers:
    assert runtime.mcp is not None
    return runtime.mcp


async def connected(runtime: Runtime) -> Runtime:
    """The runtime once each server's first start has ended: a new server's tools are offered."""
    await mcp_of(runtime).started()
    return runtime


async def test_stdio_tool_result_reaches_the_next_request_and_the_session(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """demo__add is offered with its schema; its answer is the next request's tool result, stored."""
    async with make_runtime(servers(demo=stdio_server())) as runtime:
        await connected(runtime)
        fake_llm.push(tool_call("demo__add", {"a": 2, "b": 40}, call_id="c1"))
        fake_llm.push(text("It is 42."))
        reply = await runtime.agent.handle(inbound("add 2 and 40"))
        assert reply is not None and reply.text == "It is 42."
        first, second = fake_llm.chat_requests()[-2:]
        add = next(t for t in first["tools"] if t["function"]["name"] == "demo__add")
        assert add["function"]["parameters"]["required"] == ["a", "b"]
        assert second["messages"][-1] == {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "demo__add",
            "content": "42",
        }
        assert stored_tool_results(runtime) == ["42"]


async def test_long_results_are_capped_and_other_content_is_named(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A 50,000-character result is cut to 16,000 with a marker; an image is named, not sent."""
    async with make_runtime(servers(demo=stdio_server())) as runtime:
        await connected(runtime)
        fake_llm.push(tool_call("demo__shout", {"times": 10_000}, call_id="c1"))
        fake_llm.push(tool_call("demo__picture", {}, call_id="c2"))
        fake_llm.push(text("done"))
        await runtime.agent.handle(inbound("shout, then show a picture"))
        shouted, picture = tool_results(fake_llm.chat_requests()[-1])
        assert shouted.startswith("WORD WORD") and "characters cut" in shouted
        assert len(shouted) < 16_100
        assert picture == "[image content (image/png) not shown]\na pixel"
        stored = stored_tool_results(runtime)
        assert stored[0] == shouted and len(stored[0]) < 16_100


async def test_http_server_gets_its_headers_and_answers(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Over streamable HTTP on loopback the configured headers arrive and demo__add answers."""
    entry = {"url": "", "headers": {"Authorization": "Bearer mcp-secret-token-123"}}
    async with serve_http() as url:
        entry["url"] = url
        async with make_runtime(servers(web=entry)) as runtime:
            await connected(runtime)
            secrets = runtime.config.secrets()
            assert {"Bearer mcp-secret-token-123", "mcp-secret-token-123"} <= set(secrets)
            fake_llm.push(tool_call("web__add", {"a": 1, "b": 2}, call_id="c1"))
            fake_llm.push(tool_call("web__whoami", {}, call_id="c2"))
            fake_llm.push(text("3"))
            await runtime.agent.handle(inbound("1+2?"))
            assert tool_results(fake_llm.chat_requests()[-1]) == [
                "3",
                "Bearer mcp-secret-token-123",
            ]


async def test_a_call_past_its_timeout_says_so_and_the_turn_completes(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """demo__sleep past `timeout` gives 'timed out' to the model; the server keeps serving."""
    async with make_runtime(servers(demo=stdio_server(timeout=0.5))) as runtime:
        await connected(runtime)
        fake_llm.push(tool_call("demo__sleep", {"seconds": 30}, call_id="c1"))
        fake_llm.push(tool_call("demo__add", {"a": 1, "b": 1}, call_id="c2"))
        fake_llm.push(text("finished"))
        reply = await runtime.agent.handle(inbound("sleep"))
        assert reply is not None and reply.text == "finished"
        timed_out, added = tool_results(fake_llm.chat_requests()[-1])
        assert timed_out == "Error: demo__sleep timed out after 0.5 s"
        assert added == "2"


async def test_a_crashed_server_is_unavailable_then_restarted(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """After a crash calls answer 'unavailable'; once restarted the same tools work again."""
    starts = tmp_path / "starts.txt"
    entry = stdio_server(env={"FAKE_MCP_STARTS": str(starts)})
    async with make_runtime(servers(demo=entry)) as runtime:
        await connected(runtime)
        connection = mcp_of(runtime).connection("demo")
        fake_llm.push(tool_call("demo__crash", {}, call_id="c1"))
        fake_llm.push(text("it crashed"))
        await runtime.agent.handle(inbound("crash it"))
        [crashed] = tool_results(fake_llm.chat_requests()[-1])
        assert crashed.startswith("Error: the MCP server 'demo' is unavailable right now")

        assert connection.state == RESTARTING
        fake_llm.push(tool_call("demo__add", {"a": 2, "b": 2}, call_id="c2"))
        fake_llm.push(text("still down"))
        await runtime.agent.handle(inbound("add"))
        down = tool_results(fake_llm.chat_requests()[-1])[-1]
        assert "unavailable" in down

        async with asyncio.timeout(30):
            await connection.wait_for(UP)
        assert connection.restarts == 1
        assert len(starts.read_text().splitlines()) == 2
        fake_llm.push(tool_call("demo__add", {"a": 2, "b": 2}, call_id="c3"))
        fake_llm.push(text("4"))
        await runtime.agent.handle(inbound("add again"))
        assert tool_results(fake_llm.chat_requests()[-1])[-1] == "4"


async def test_a_server_that_fails_to_start_is_logged_once_and_skipped(
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    refused_port: int,
) -> None:
    """memgate starts; one warning line per broken server; the working server's tools answer."""
    gone = f"http://127.0.0.1:{refused_port}/mcp"
    config = servers(
        broken={"command": "/nonexistent/mcp-server", "env": {"TOKEN": "env-secret-value-9"}},
        gone={"url": gone},
        demo=stdio_server(),
    )
    with caplog.at_level(logging.DEBUG, logger="gateway.tools.mcp.servers"):
        async with make_runtime(config) as runtime:
            await connected(runtime)
            states = {c.name: c.state for c in mcp_of(runtime).connections}
            assert states == {"broken": "failed", "gone": "failed", "demo": UP}
            fake_llm.push(tool_call("demo__add", {"a": 3, "b": 4}, call_id="c1"))
            fake_llm.push(text("7"))
            await runtime.agent.handle(inbound("3+4"))
            request = fake_llm.chat_requests()[-1]
            assert tool_results(request) == ["7"]
            assert not [n for n in offered(request) if n.startswith(("broken__", "gone__"))]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    for name in ("broken", "gone"):
        lines = [w for w in warnings if f"server={name} " in w]
        assert len(lines) == 1 and "failed to start" in lines[0] and "\n" not in lines[0]
    assert all("env-secret-value-9" not in r.getMessage() for r in caplog.records)


async def test_group_chats_get_mcp_tools_only_when_scopes_include_group(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Default scopes keep MCP tools to private chats; `scopes: [private, group]` adds groups."""
    config = servers(mine=stdio_server(), shared=stdio_server(scopes=["private", "group"]))
    async with make_runtime(config) as runtime:
        await connected(runtime)
        await runtime.agent.handle(inbound("hi", chat_id="-100", is_group=True))
        group = offered(fake_llm.chat_requests()[-1])
        await runtime.agent.handle(inbound("hi", chat_id="9", sender_is_owner=False))
        guest = offered(fake_llm.chat_requests()[-1])
        await runtime.agent.handle(inbound("hi"))
        private = offered(fake_llm.chat_requests()[-1])
    assert "shared__add" in group and not [n for n in group if n.startswith("mine__")]
    assert "shared__add" in guest and not [n for n in guest if n.startswith("mine__")]
    assert {"mine__add", "shared__add"} <= set(private)


async def test_allow_list_and_disabled_servers(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Only tools named in `allow` are offered; a disabled server is not started at all."""
    config = servers(
        demo=stdio_server(allow=["add", "missing"]),
        off=stdio_server(enabled=False, env={"X": "${UNSET_MCP_VARIABLE}"}),
    )
    async with make_runtime(config) as runtime:
        await connected(runtime)
        assert [c.name for c in mcp_of(runtime).connections] == ["demo"]
        await runtime.agent.handle(inbound("hi"))
    names = offered(fake_llm.chat_requests()[-1])
    assert [n for n in names if "__" in n] == ["demo__add"]


async def test_arguments_are_checked_against_the_schema_before_the_call(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Arguments of the wrong type come back as an error naming the field; no call is made."""
    async with make_runtime(servers(demo=stdio_server())) as runtime:
        await connected(runtime)
        fake_llm.push(tool_call("demo__add", {"a": "two", "b": 2}, call_id="c1"))
        fake_llm.push(text("oops"))
        await runtime.agent.handle(inbound("add"))
    [result] = tool_results(fake_llm.chat_requests()[-1])
    assert result.startswith("Error: a: 'two' is not of type 'integer'")


def test_malformed_or_unusable_tools_are_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bad schema, a non-object schema or an unusable name leaves that tool out, with a warning."""
    listed = [
        McpTool(name="good", input_schema={"type": "object", "properties": {}}),
        McpTool(name="bad", input_schema={"type": "object", "properties": {"x": {"type": 5}}}),
        McpTool(name="flat", input_schema={"type": "string"}),
        McpTool(name="has space", input_schema={"type": "object"}),
    ]
    with caplog.at_level(logging.WARNING, logger="gateway.tools.mcp.servers"):
        tools = offered_tools("srv", listed, allow=None)
    assert [t.qualified for t in tools] == ["srv__good"]
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "malformed schema server=srv tool=bad" in warned
    assert "not an object server=srv tool=flat" in warned
    assert "name unusable server=srv tool='has space'" in warned


async def test_a_server_that_never_answers_fails_within_its_start_timeout(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A server that starts but never speaks is given up after start_timeout; memgate answers."""
    config = servers(mute={"command": "sleep", "args": ["60"], "start_timeout": 0.5})
    async with make_runtime(config) as runtime:
        await connected(runtime)
        [mute] = mcp_of(runtime).connections
        assert mute.state == "failed" and mute.error == "no answer within 0.5 s"
        reply = await runtime.agent.handle(inbound("hello"))
        assert reply is not None and reply.text == "echo: hello"


async def test_a_stdio_server_gets_its_own_env_and_none_of_memgates_secrets(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable of memgate's environment does not reach the server; one from `env` does."""
    monkeypatch.setenv("FAKE_MCP_SECRET", "memgate-own-secret")
    config = servers(
        plain=stdio_server(), given=stdio_server(env={"FAKE_MCP_SECRET": "given-to-server"})
    )
    async with make_runtime(config) as runtime:
        await connected(runtime)
        fake_llm.push(tool_call("plain__whoami", {}, call_id="c1"))
        fake_llm.push(tool_call("given__whoami", {}, call_id="c2"))
        fake_llm.push(text("ok"))
        await runtime.agent.handle(inbound("who?"))
    plain, given = tool_results(fake_llm.chat_requests()[-1])
    assert "memgate-own-secret" not in plain and given == "given-to-server"
