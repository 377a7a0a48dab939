"""exec's approvals: the owner is asked in the chat, and yes, no, silence and allow patterns decide."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.bus import OutboundMessage
from gateway.config.tools import ExecConfig
from gateway.service.app import Runtime
from gateway.tools.exec import needs_approval
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results
from tests.sandboxing import needs_bwrap, prepare_workspace
from tests.terminal import Terminal


class Shown:
    """What the service's delivery took for the chats (the channels' side of `notify`)."""

    def __init__(self) -> None:
        self.messages: list[OutboundMessage] = []
        self.arrived = asyncio.Condition()

    async def deliver(self, message: OutboundMessage) -> str | None:
        async with self.arrived:
            self.messages.append(message)
            self.arrived.notify_all()
        return None

    async def request_id(self, count: int = 1) -> str:
        """The id of the `count`-th request shown, once it is."""
        async with asyncio.timeout(10), self.arrived:
            await self.arrived.wait_for(lambda: len(self.messages) >= count)
        found = re.search(r"/approve (\w+)", self.messages[count - 1].text_with_commands())
        assert found is not None
        return found.group(1)


def exec_settings(**extra: Any) -> dict[str, Any]:
    return {"tools": {"exec": {"enabled": True, "timeout": 20, **extra}}}


@pytest.fixture
async def asking(
    tmp_path: Path, make_runtime: RuntimeFactory
) -> AsyncIterator[tuple[Runtime, Shown]]:
    """A runtime with exec on and the default approval (unlisted), `echo *` allowed."""
    prepare_workspace(tmp_path)
    async with make_runtime(exec_settings(allow=["echo *"], approve_timeout=20)) as runtime:
        shown = Shown()
        assert runtime.agent.tools.approvals is not None
        runtime.agent.tools.approvals.notify = shown.deliver
        yield runtime, shown


def start_turn(
    runtime: Runtime, llm: FakeLLM, command: str
) -> asyncio.Future[OutboundMessage | None]:
    llm.push(tool_call("exec", {"command": command}))
    llm.push(text("done"), match=lambda body: bool(tool_results(body)))  # after its tool step
    return asyncio.ensure_future(runtime.agent.handle(inbound("run it")))


def last_result(llm: FakeLLM) -> str:
    return tool_results(llm.chat_requests()[-1])[-1]


@needs_bwrap
async def test_an_unlisted_command_runs_after_the_owners_yes(
    asking: tuple[Runtime, Shown], fake_llm: FakeLLM
) -> None:
    """The command is shown in the asking chat; /approve ID runs it; the session keeps the yes."""
    runtime, shown = asking
    turn = start_turn(runtime, fake_llm, "touch approved.txt")
    ident = await shown.request_id()
    assert shown.messages[0].chat_id == "42" and "touch approved.txt" in shown.messages[0].text
    assert not (runtime.config.workspace / "approved.txt").exists()
    answer = await runtime.agent.handle(inbound(f"/approve {ident}"))
    assert answer is not None and answer.text.startswith("Approved")
    await turn
    assert (runtime.config.workspace / "approved.txt").exists()
    assert "approved by the owner" in last_result(fake_llm)
    session = await runtime.sessions.get("test:42")
    stored = [m for m in session.messages if m.get("role") == "tool"]
    assert "approved by the owner" in str(stored[-1]["content"])


@needs_bwrap
async def test_no_refuses_it_and_another_chat_is_answered_meanwhile(
    asking: tuple[Runtime, Shown], fake_llm: FakeLLM
) -> None:
    """/deny refuses the command; while the owner has not answered, other chats go on."""
    runtime, shown = asking
    turn = start_turn(runtime, fake_llm, "touch denied.txt")
    ident = await shown.request_id()
    fake_llm.push(text("answered meanwhile"))
    other = await runtime.agent.handle(inbound("hello", chat_id="43"))
    assert other is not None and other.text == "answered meanwhile"
    assert not turn.done()
    answer = await runtime.agent.handle(inbound(f"/deny {ident}"))
    assert answer is not None and answer.text.startswith("Denied")
    await turn
    assert "Not run: refused by the owner" in last_result(fake_llm)
    assert not (runtime.config.workspace / "denied.txt").exists()


@needs_bwrap
async def test_silence_refuses_it_at_the_approve_timeout(
    tmp_path: Path, make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """No answer within approve_timeout: the command is refused and never runs."""
    prepare_workspace(tmp_path)
    async with make_runtime(exec_settings(approve_timeout=0.5)) as runtime:
        shown = Shown()
        assert runtime.agent.tools.approvals is not None
        runtime.agent.tools.approvals.notify = shown.deliver
        async with asyncio.timeout(15):  # thirty times approve_timeout: it was not waited out
            await start_turn(runtime, fake_llm, "touch late.txt")
        assert len(shown.messages) == 1
        assert "did not answer in time" in last_result(fake_llm)
        assert not (runtime.config.workspace / "late.txt").exists()
        assert runtime.agent.tools.approvals.waiting() == {}


@needs_bwrap
async def test_an_allowed_pattern_runs_without_asking(
    asking: tuple[Runtime, Shown], fake_llm: FakeLLM
) -> None:
    """`echo *` is allowed: it runs at once; the same with a `;` after it is asked about."""
    runtime, shown = asking
    await start_turn(runtime, fake_llm, "echo  plain words")
    assert shown.messages == []
    assert "plain words" in last_result(fake_llm)
    turn = start_turn(runtime, fake_llm, "echo hi; touch sneaky.txt")
    ident = await shown.request_id()
    await runtime.agent.handle(inbound(f"/deny {ident}"))
    await turn
    assert not (runtime.config.workspace / "sneaky.txt").exists()


@needs_bwrap
@pytest.mark.parametrize(
    ("fields", "reply"),
    [
        ({"sender_is_owner": False}, "Only the owner"),
        ({"is_group": True}, "Only the owner"),
        ({"is_group": True, "sender_is_owner": False}, "Only the owner"),
        ({"chat_id": "43"}, "No request"),
    ],
    ids=["guest-in-the-dm", "owner-in-a-group", "guest-in-a-group", "owner-in-another-chat"],
)
async def test_a_guest_a_group_or_another_chat_cannot_approve(
    asking: tuple[Runtime, Shown], fake_llm: FakeLLM, fields: dict[str, Any], reply: str
) -> None:
    """Only the owner, in the chat that asked, answers a request; others leave it waiting."""
    runtime, shown = asking
    turn = start_turn(runtime, fake_llm, "touch approved.txt")
    ident = await shown.request_id()
    answer = await runtime.agent.handle(inbound(f"/approve {ident}", **fields))
    assert answer is not None and answer.text.startswith(reply)
    assert not turn.done()
    assert runtime.agent.tools.approvals is not None
    assert ident in runtime.agent.tools.approvals.waiting()
    await runtime.agent.handle(inbound(f"/deny {ident}"))
    await turn
    assert not (runtime.config.workspace / "approved.txt").exists()


@pytest.mark.parametrize(
    ("approve", "command", "asks"),
    [
        ("unlisted", "ls -la", False),
        ("unlisted", "ls", True),  # `ls *` wants an argument
        ("unlisted", "df -h", False),
        ("unlisted", "df -h | mail x", True),
        ("unlisted", "ls $(rm -rf .)", True),
        ("unlisted", "rm -rf .", True),
        ("always", "df -h", True),
        ("never", "rm -rf .", False),
    ],
)
def test_which_commands_ask(approve: str, command: str, asks: bool) -> None:
    """approve and allow decide; shell syntax beyond one program always asks under unlisted."""
    settings = ExecConfig(enabled=True, approve=approve, allow=["ls *", "df -h"])
    assert needs_approval(command, settings) is asks


@needs_bwrap
async def test_the_terminal_shows_the_request_and_takes_the_answer_at_once(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """In `memgate chat` the request is printed, and /approve typed while the turn waits is
    answered at once (not queued behind the turn it would unblock); the command runs."""
    workspace = prepare_workspace(tmp_path)
    path = tmp_path / "config.yaml"
    path.write_text(
        f"workspace: {workspace}\nstate_dir: {tmp_path / 'state'}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  api_key: sk-pty-secret-0123456789\n  max_retries: 0\n"
        "tools:\n  exec:\n    enabled: true\n    approve_timeout: 30\n"
    )
    fake_llm.push(tool_call("exec", {"command": "touch from-terminal.txt"}))
    fake_llm.push(text("made it"))
    env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home")}
    terminal = Terminal(["chat", "--config", str(path)], env)
    try:
        await terminal.wait_for("you> ")
        terminal.type("make the file\n")
        await terminal.wait_for("Run this command? Answer within 30 s.")
        await terminal.wait_for(" or /deny ")
        found = re.search(r"/approve (\w+) or", terminal.output)
        assert found is not None, terminal.output
        terminal.type(f"/approve {found.group(1)}\n")
        await terminal.wait_for("made it")
        await terminal.wait_for("you> ", 2)
        terminal.type("\x04")  # Ctrl-D: quit
        assert await asyncio.wait_for(terminal.exit_code(), 30) == 0, terminal.output
    finally:
        terminal.close()
    assert "Approved: running it." in terminal.output
    assert (workspace / "from-terminal.txt").exists()
