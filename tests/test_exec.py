"""`exec`: commands run in the real bubblewrap, reach the workspace and nothing else, within limits."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results
from tests.sandboxing import needs_bwrap, prepare_workspace

pytestmark = needs_bwrap
EXEC_ON: dict[str, Any] = {
    "tools": {
        "exec": {
            "enabled": True,
            "approve": "never",
            "timeout": 30,
            "limits": {"processes": 32, "memory_mb": 512, "cpu_seconds": 20},
        }
    }
}


@pytest.fixture
async def exec_runtime(
    tmp_path: Path, make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    """The real runtime with exec on (no approval asked) and a secret in memgate's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret-4711")
    prepare_workspace(tmp_path)
    async with make_runtime(EXEC_ON) as runtime:
        yield runtime


async def run_exec(runtime: Runtime, llm: FakeLLM, command: str, **fields: Any) -> str:
    """Have the model call exec with `command` in chat 42 (the owner's DM); the tool's result."""
    llm.push(tool_call("exec", {"command": command}))
    llm.push(text("done"))
    before = len(llm.chat_requests())
    reply = await runtime.agent.handle(inbound("run it", **fields))
    assert reply is not None
    results = tool_results(llm.chat_requests()[before + 1])
    return results[-1]


async def test_echo_and_a_workspace_script_run_and_their_output_comes_back(
    exec_runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """echo's output and a script's from the workspace come back with their exit status."""
    workspace = exec_runtime.config.workspace
    script = workspace / "hello.sh"
    script.write_text('#!/bin/sh\necho "script says $1"\nexit 3\n')
    script.chmod(0o755)
    result = await run_exec(exec_runtime, fake_llm, "echo hello from exec")
    assert result.startswith("exit status 0")
    assert "hello from exec" in result
    result = await run_exec(exec_runtime, fake_llm, "./hello.sh hi")
    assert "exit status 3" in result and "script says hi" in result


async def test_a_file_written_lands_in_the_workspace(
    exec_runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A command's file is in the workspace afterwards, at the same path."""
    await run_exec(exec_runtime, fake_llm, "echo made inside > made.txt && pwd")
    made = exec_runtime.config.workspace / "made.txt"
    assert made.read_text() == "made inside\n"


async def test_the_state_config_home_shadow_and_outside_files_are_absent(
    exec_runtime: Runtime, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """The state folder, the config, /root, /etc/shadow and a readable file outside the workspace
    do not exist inside; memgate's secrets are not in the environment."""
    config = exec_runtime.config
    assert config.source is not None
    config.source.write_text("llm:\n  api_key: sk-file-secret\n")
    config.source.chmod(0o644)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside secret\n")
    outside.chmod(0o644)
    for path in (config.state_dir, config.source, Path("/root"), Path("/etc/shadow"), outside):
        assert path.exists()
        result = await run_exec(exec_runtime, fake_llm, f"ls -d {path} && cat {path}")
        assert "No such file or directory" in result, (path, result)
        assert "secret" not in result
    result = await run_exec(exec_runtime, fake_llm, "env")
    assert "sk-env-secret" not in result and "sk-test-secret" not in result
    names = {line.split("=")[0] for line in result.splitlines()[2:] if "=" in line}
    assert names <= {"PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_"}
    assert "OPENAI_API_KEY" not in names


async def test_a_loopback_server_cannot_be_reached_with_the_network_off(
    tmp_path: Path, make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A TCP connect to a server on 127.0.0.1 fails inside; with network on, the same connects."""
    accepted = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = (
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=3); print('connected')\""
    )
    prepare_workspace(tmp_path)
    async with server:
        async with make_runtime(EXEC_ON) as runtime:
            result = await run_exec(runtime, fake_llm, probe)
        assert "connected" not in result.split("stderr")[0]
        assert "Error" in result  # ConnectionRefused or Network unreachable
        assert not accepted.is_set()
        networked = {"tools": {"exec": {**EXEC_ON["tools"]["exec"], "network": True}}}
        async with make_runtime(networked) as runtime:
            result = await run_exec(runtime, fake_llm, probe)
        assert "connected" in result
        assert accepted.is_set()


def sleepers(mark: str) -> list[int]:
    """Pids whose command line holds `mark`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_a_long_command_ends_at_the_timeout_with_its_children(
    exec_runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """`sleep 1000` and a child it left in the background are both gone at the timeout."""
    child, parent = (f"1000.{random.randrange(10**6)}" for _ in range(2))  # this run's own
    fake_llm.push(tool_call("exec", {"command": f"sleep {child} & sleep {parent}", "timeout": 2}))
    fake_llm.push(text("done"))
    await exec_runtime.agent.handle(inbound("sleep"))
    result = tool_results(fake_llm.chat_requests()[-1])[-1]
    assert "still running after 2 s" in result
    async with asyncio.timeout(5):
        while sleepers(child) or sleepers(parent):  # noqa: ASYNC110 (processes: no event)
            await asyncio.sleep(0.05)


async def test_a_fork_bomb_is_stopped_and_the_gateway_answers_another_chat(
    exec_runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A fork bomb hits the process limit and ends; another chat is answered meanwhile."""
    go = exec_runtime.config.workspace / "go"
    # The bomb and a loop of background sleeps run in a subshell, which dies when a fork is
    # refused ("Cannot fork"); only then does the shell go on, so the limit has been hit before
    # the test lets it end. What follows uses builtins only: no fork is left to be had.
    command = (
        "( b() { b | b & }; b; while :; do sleep 1000 & done ) 2>/tmp/bomb.err; "
        'read -r why < /tmp/bomb.err; echo "limit reached: $why"; '
        f"while [ ! -e {go} ]; do :; done; echo bomb over"
    )
    fake_llm.push(tool_call("exec", {"command": command, "timeout": 25}))
    fake_llm.push(text("other chat answered"))
    fake_llm.push(text("done"))
    bomb = asyncio.ensure_future(exec_runtime.agent.handle(inbound("bomb")))
    await fake_llm.wait_for_requests(1, "chat")
    # The bomb is running (its exec is waiting for `go`) while another chat is answered.
    other = await exec_runtime.agent.handle(inbound("hello", chat_id="43"))
    assert other is not None and other.text == "other chat answered"
    assert not bomb.done()
    go.touch()
    await bomb
    result = tool_results(fake_llm.chat_requests()[-1])[-1]
    assert "bomb over" in result
    [reached] = [line for line in result.splitlines() if line.startswith("limit reached: ")]
    assert "fork" in reached.lower(), result  # "Cannot fork": the process limit stopped it


async def test_the_process_limit_is_what_stops_forking(
    exec_runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """Background processes started one by one stop near the sandbox's limit (64), far below
    the 300 this loop would start without it (a bounded loop: safe to run with the limit off)."""
    command = (
        "( i=0; while [ $i -lt 300 ]; do sleep 1000 & i=$((i+1)); echo $i > /tmp/count; done ) "
        '2>/dev/null; read -r n < /tmp/count; echo "started $n"'
    )
    fake_llm.push(tool_call("exec", {"command": command, "timeout": 40}))
    fake_llm.push(text("done"))
    await exec_runtime.agent.handle(inbound("count"))
    result = tool_results(fake_llm.chat_requests()[-1])[-1]
    started = [line for line in result.splitlines() if line.startswith("started ")]
    assert started and int(started[0].removeprefix("started ")) < 64, result


async def test_a_10_gb_allocation_is_refused(exec_runtime: Runtime, fake_llm: FakeLLM) -> None:
    """Allocating 10 GB fails at the memory limit instead of taking the machine's memory."""
    result = await run_exec(
        exec_runtime, fake_llm, "python3 -c 'b = bytearray(10 * 1024**3); print(len(b))'"
    )
    assert "MemoryError" in result
    assert "exit status 1" in result


@pytest.mark.parametrize(
    "fields",
    [
        {"is_group": True, "sender_is_owner": True},
        {"sender_is_owner": False},
        {"is_group": True, "sender_is_owner": False},
    ],
    ids=["owner-in-group", "guest-dm", "guest-in-group"],
)
async def test_groups_and_guests_are_never_offered_exec_nor_can_call_it(
    tmp_path: Path, make_runtime: RuntimeFactory, fake_llm: FakeLLM, fields: dict[str, Any]
) -> None:
    """Even with groups and guests given the shared scope, exec is not in their tools, and a
    call by name is an unknown tool that runs nothing."""
    prepare_workspace(tmp_path)
    shared = {"memory": {"groups": "shared", "guests": "shared"}}
    async with make_runtime({**EXEC_ON, **shared}) as runtime:
        fake_llm.push(tool_call("exec", {"command": "touch pwned"}))
        fake_llm.push(text("done"))
        await runtime.agent.handle(inbound("run", chat_id="-100", **fields))
        first, second = fake_llm.chat_requests()[-2:]
        offered = [tool["function"]["name"] for tool in first.get("tools", [])]
        assert "exec" not in offered
        assert "unknown tool 'exec'" in tool_results(second)[-1]
        assert not (runtime.config.workspace / "pwned").exists()
        # The owner's own DM, on the same runtime, is offered it.
        fake_llm.push(text("hi"))
        await runtime.agent.handle(inbound("hi"))
        owner = [tool["function"]["name"] for tool in fake_llm.chat_requests()[-1]["tools"]]
        assert "exec" in owner


async def test_stop_during_a_command_ends_its_processes(
    exec_runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/stop while a command runs cancels the turn, and the command's processes end with it."""
    mark = f"1000.{random.randrange(10**6)}"  # this run's own: another's sleepers don't count
    fake_llm.push(tool_call("exec", {"command": f"sleep {mark}"}))
    turn = asyncio.ensure_future(exec_runtime.agent.handle(inbound("sleep")))
    async with asyncio.timeout(10):
        while not sleepers(mark):  # noqa: ASYNC110 (processes: no event)
            await asyncio.sleep(0.05)
    stopped = await exec_runtime.agent.handle(inbound("/stop"))
    assert stopped is not None and stopped.text == "Stopped."
    await turn
    async with asyncio.timeout(5):
        while sleepers(mark):  # noqa: ASYNC110 (processes: no event)
            await asyncio.sleep(0.05)


async def test_sandbox_none_is_a_loud_opt_out(
    tmp_path: Path,
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """tools.exec.sandbox: none runs commands without bwrap, with a warning at start saying so;
    the environment is still cleared."""
    prepare_workspace(tmp_path)
    unsandboxed = {"tools": {"exec": {**EXEC_ON["tools"]["exec"], "sandbox": "none"}}}
    with caplog.at_level("WARNING", logger="gateway.tools.exec"):
        async with make_runtime(unsandboxed) as runtime:
            result = await run_exec(runtime, fake_llm, "echo unboxed; env")
    assert "WITHOUT a sandbox" in caplog.text
    assert "unboxed" in result and "sk-test-secret" not in result


async def test_without_bwrap_exec_is_not_offered(
    tmp_path: Path,
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Enabled but with no bwrap on PATH, the owner's chat is not offered exec at all."""
    prepare_workspace(tmp_path)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    async with make_runtime(EXEC_ON) as runtime:
        fake_llm.push(text("hi"))
        await runtime.agent.handle(inbound("hi"))
    offered = [tool["function"]["name"] for tool in fake_llm.chat_requests()[-1]["tools"]]
    assert "exec" not in offered and "read_file" in offered
