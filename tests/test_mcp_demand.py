"""MCP servers in a one-shot chat (`memgate chat -m`): started only when their tools are called."""

from __future__ import annotations

import asyncio
import json
import shlex
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.service.app import Runtime, open_runtime
from tests.conftest import IMPORT_TIMES, RuntimeFactory, build_config, imported, inbound, memgate
from tests.fakes.llm import FakeLLM, text, tool_call
from tests.fakes.mcp_server import stdio_server
from tests.fakes.mcp_silent import silent_server

pytestmark = pytest.mark.timeout(120)


def servers(**entries: dict[str, Any]) -> dict[str, Any]:
    return {"tools": {"mcp_servers": entries}}


def spawn_noted(entry: dict[str, Any], spawns: Path) -> dict[str, Any]:
    """The server `entry`, run by a shell that notes `spawned` in `spawns` before anything else:
    a process killed before its interpreter is even up still counts."""
    command = shlex.join([entry.pop("command"), *entry.pop("args")])
    script = f"echo spawned >> {shlex.quote(str(spawns))}; exec {command}"
    return {"command": "sh", "args": ["-c", script], **entry}


def starts(spawns: Path) -> int:
    """How many times the server behind `spawns` was started."""
    if not spawns.exists():
        return 0
    return spawns.read_text(encoding="utf-8").count("spawned")


def one_shot(
    tmp_path: Path, fake_llm: FakeLLM, config: dict[str, Any]
) -> AbstractAsyncContextManager[Runtime]:
    """The runtime as `memgate chat -m` builds it."""
    built = build_config(tmp_path / "workspace", fake_llm.url, config)
    return open_runtime(built, mcp_on_demand=True)


async def remember(make_runtime: RuntimeFactory, config: dict[str, Any]) -> None:
    """A run that starts every server, so that the tools each lists are remembered."""
    async with make_runtime(config) as runtime:
        assert runtime.mcp is not None
        async with asyncio.timeout(60):
            await runtime.mcp.started()


async def test_a_remembered_server_starts_only_when_its_tool_is_called(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A chat that calls no tool of a remembered server never starts it; one that does, works."""
    notes = tmp_path / "demo.txt"
    config = servers(demo=spawn_noted(stdio_server(), notes))
    await remember(make_runtime, config)
    assert starts(notes) == 1

    async with one_shot(tmp_path, fake_llm, config) as runtime:
        reply = await runtime.agent.handle(inbound("hello"))
        assert reply is not None and reply.text == "echo: hello"
        assert "demo__add" in [t["function"]["name"] for t in fake_llm.chat_requests()[-1]["tools"]]
    assert starts(notes) == 1

    async with one_shot(tmp_path, fake_llm, config) as runtime:
        fake_llm.push(tool_call("demo__add", {"a": 20, "b": 22}, call_id="c1"))
        fake_llm.push(text("42"))
        async with asyncio.timeout(60):
            reply = await runtime.agent.handle(inbound("add"))
        assert reply is not None and reply.text == "42"
        tool = [m for m in fake_llm.chat_requests()[-1]["messages"] if m["role"] == "tool"]
        assert [m["content"] for m in tool] == ["42"]
    assert starts(notes) == 2


async def test_a_new_server_is_learnt_once_and_a_failed_one_not_started_again(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """A one-shot chat starts a server it knows nothing of and remembers how its start went: its
    tools, or that it failed; the next chat starts neither."""
    demo, silent = tmp_path / "demo.txt", tmp_path / "silent.txt"
    config = servers(
        demo=spawn_noted(stdio_server(), demo),
        silent=spawn_noted(silent_server(tmp_path / "notes.txt", start_timeout=1), silent),
    )
    async with one_shot(tmp_path, fake_llm, config) as runtime:
        await runtime.agent.handle(inbound("first"))
    assert starts(demo) == 1 and starts(silent) == 1
    cache = json.loads((tmp_path / "state" / "mcp-tools.json").read_text(encoding="utf-8"))
    assert cache["servers"]["silent"]["failed"] == "no answer within 1 s"
    assert {t["name"] for t in cache["servers"]["demo"]["tools"]} >= {"add", "sleep"}

    async with one_shot(tmp_path, fake_llm, config) as runtime:
        await runtime.agent.handle(inbound("second"))
        offered = [t["function"]["name"] for t in fake_llm.chat_requests()[-1]["tools"]]
        assert "demo__add" in offered and not [n for n in offered if n.startswith("silent__")]
    assert starts(demo) == 1 and starts(silent) == 1


async def test_chat_m_with_every_server_remembered_does_not_import_the_mcp_sdk(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """`memgate chat -m` answers without loading the MCP SDK when no server has to start."""
    notes = tmp_path / "demo.txt"
    config = servers(demo=spawn_noted(stdio_server(), notes))
    await remember(make_runtime, config)
    path = tmp_path / "config.yaml"
    raw = {
        "workspace": str(tmp_path / "workspace"),
        "state_dir": str(tmp_path / "state"),
        "llm": {"base_url": fake_llm.url, "api_key": "sk-test", "model": "m", "max_retries": 0},
        **config,
    }
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    code, out, err = await memgate(
        "chat", "-m", "hi", "--config", str(path), home=tmp_path / "home", env=IMPORT_TIMES
    )
    assert code == 0 and "echo: hi" in out
    assert "mcp" not in imported(err) and "gateway.tools.mcp.servers" not in imported(err)
    assert starts(notes) == 1


async def test_memory_consolidate_starts_no_server(fake_llm: FakeLLM, tmp_path: Path) -> None:
    """`memgate memory consolidate` calls no tool, so no MCP server is started for it (nor the
    MCP SDK loaded)."""
    notes = tmp_path / "demo.txt"
    path = tmp_path / "config.yaml"
    raw = {
        "workspace": str(tmp_path / "workspace"),
        "state_dir": str(tmp_path / "state"),
        "llm": {"base_url": fake_llm.url, "api_key": "sk-test", "model": "m", "max_retries": 0},
        **servers(demo=spawn_noted(stdio_server(), notes)),
    }
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    home = tmp_path / "home"
    chat = ("chat", "-m", "the key is under the mat", "--config", str(path))
    code, _, err = await memgate(*chat, home=home)
    assert code == 0, err
    learnt = starts(notes)  # a chat starts a server it knows nothing of, to learn its tools
    consolidate = ("memory", "consolidate", "--all", "--config", str(path))
    code, out, err = await memgate(*consolidate, home=home, env=IMPORT_TIMES)
    assert code == 0, err
    # Not even loaded: no server is started, nor could be.
    assert "mcp" not in imported(err) and "gateway.tools.mcp.servers" not in imported(err)
    assert "consolidated 1 session(s); 0 message(s) still pending" in out
    assert "under the mat" in (tmp_path / "workspace/memory/HISTORY.md").read_text()
    assert starts(notes) == learnt
