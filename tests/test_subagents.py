"""Background agents (`spawn`): the real runtime, the real python-telegram-bot against the fake Bot
API (owner: user 42), the fake LLM holding the background agent's call where a test needs it, and
the subagents' task group wired as `memgate run` wires it."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.agent.subagents import Owners, Subagents, describe_listed
from gateway.bus import InboundMessage
from gateway.service.app import Runtime, open_runtime
from gateway.service.run import chat_ready, chat_sender
from tests.conftest import build_config, deep_merge
from tests.fakes.llm import FakeLLM, is_background, is_consolidation, text, tool_call, tool_results
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running
from tests.resilience.harness import until
from tests.scheduling import telegram_settings
from tests.terminal import Terminal

TASK = "read the three pages in notes/ and summarise them"
RESULT = "The three pages say: plant tomatoes, water daily, harvest in August."


def _chat(body: dict[str, Any]) -> bool:
    """The parent chat's own calls (not the background agent's, not consolidation's)."""
    return not is_background(body) and not is_consolidation(body)


def _plain(telegram: FakeTelegram) -> list[str]:
    return [str(sent.get("plain", sent.get("text"))) for sent in telegram.sent(42)]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]


@asynccontextmanager
async def gateway(
    tmp_path: Path,
    fake_llm: FakeLLM,
    telegram: FakeTelegram,
    memory: dict[str, Any] | None = None,
    owners: Owners | None = None,
    **subagents: Any,
) -> AsyncIterator[Runtime]:
    """The runtime, its Telegram channel connected, and the background agents' task group."""
    overrides = {
        "channels": {"telegram": {**telegram_settings(telegram, ["42"]), "streaming": False}},
        "agent": {"subagents": subagents},
        "memory": memory or {},
    }
    config = build_config(tmp_path / "workspace", fake_llm.url, deep_merge({}, overrides))
    async with open_runtime(config) as runtime:
        channel = agent_channel(telegram, runtime)
        background = runtime.agent.subagents
        assert background is not None
        async with running(channel):
            work = background.run(
                runtime.agent.job_message, chat_sender([channel]), chat_ready([channel]), owners
            )
            task = asyncio.create_task(work)
            try:
                yield runtime
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


@asynccontextmanager
async def owners_task_held(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> AsyncIterator[tuple[Runtime, set[str], asyncio.Event, Owners]]:
    """Owner 42's background task, its model call held until the event is set; the set is the
    owners the gateway's access lists (empty it as a reload taking 42 out would), the function
    what asks it."""
    owners = {"42"}
    release = asyncio.Event()
    fake_llm.push(tool_call("spawn", {"task": TASK, "label": "garden pages"}), match=_chat)
    fake_llm.push(text("Started it."), match=_chat)
    fake_llm.push(text(RESULT), hold=release, match=is_background)

    def is_owner(channel: str, sender_id: str, username: str | None) -> bool:
        return sender_id in owners

    async with gateway(tmp_path, fake_llm, fake_telegram, owners=is_owner) as runtime:
        fake_telegram.message("please summarise my garden pages")
        await fake_telegram.wait_for(lambda: "Started it." in _plain(fake_telegram))
        await fake_llm.wait_for(lambda: any(is_background(r) for r in fake_llm.requests))
        yield runtime, owners, release, is_owner


async def test_a_result_is_withheld_from_someone_no_longer_an_owner(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """An owner starts a task, a reload takes them out of allow_from while it runs: its result
    (words from the private scope) is neither sent to their chat nor stored in its history."""
    held = owners_task_held(tmp_path, fake_llm, fake_telegram)
    async with held as (runtime, owners, release, _):
        owners.clear()  # as a SIGHUP with 42 taken out of allow_from leaves the access
        release.set()
        await _wait(runtime, lambda: _background(runtime).finished == 1)
        parent = tmp_path / "workspace" / "sessions" / "telegram:42.jsonl"
        lines = _lines(parent)
        assert describe_listed(runtime.config.state_dir) == "subagents:  none running"
    assert not any(RESULT in t for t in _plain(fake_telegram))
    assert not any(RESULT in str(m.get("content")) for m in lines)


async def test_a_reload_stops_the_tasks_of_someone_no_longer_an_owner(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """What memgate run does at a SIGHUP: the tasks of a starter the new access no longer lists
    stop at once (they work in the private scope) and are unlisted; nothing reaches their chat."""
    held = owners_task_held(tmp_path, fake_llm, fake_telegram)
    async with held as (runtime, owners, release, is_owner):
        background = _background(runtime)
        assert background.withdraw(is_owner) == 0  # still an owner: nothing stops
        owners.clear()
        assert background.withdraw(is_owner) == 1
        assert not background.running()
        state = runtime.config.state_dir
        await _wait(runtime, lambda: describe_listed(state) == "subagents:  none running")
        release.set()  # the model's answer now comes to a task that is no more
        fake_telegram.message("hello")  # a later turn: the chat goes on, the result never comes
        await fake_telegram.wait_for(lambda: "echo: hello" in _plain(fake_telegram))
    assert not any(RESULT in t for t in _plain(fake_telegram))


async def _wait(runtime: Runtime, check: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        await _background(runtime).wait_for(check)


def _background(runtime: Runtime) -> Subagents:
    assert runtime.agent.subagents is not None
    return runtime.agent.subagents


async def test_spawn_returns_at_once_and_its_result_reaches_the_chat_once(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """spawn ends the turn at once; the chat answers while the background call is held; the
    result is sent once, stored as a delivered answer of the parent session, and the next
    turn's request carries it."""
    release = asyncio.Event()
    fake_llm.push(tool_call("spawn", {"task": TASK, "label": "garden pages"}), match=_chat)
    fake_llm.push(text("Started it; I will tell you when it is done."), match=_chat)
    fake_llm.push(text(RESULT), hold=release, match=is_background)
    async with gateway(tmp_path, fake_llm, fake_telegram) as runtime:
        fake_telegram.message("please summarise my garden pages")
        await fake_telegram.wait_for(
            lambda: "Started it; I will tell you when it is done." in _plain(fake_telegram)
        )
        await fake_llm.wait_for(lambda: any(is_background(r) for r in fake_llm.requests))
        fake_telegram.message("meanwhile, hello")  # the chat is free while the call is held
        await fake_telegram.wait_for(lambda: "echo: meanwhile, hello" in _plain(fake_telegram))
        assert not any(RESULT in t for t in _plain(fake_telegram))
        fake_telegram.message("/tasks")
        await fake_telegram.wait_for(
            lambda: any("garden pages" in t for t in _plain(fake_telegram))
        )
        release.set()
        await fake_telegram.wait_for(lambda: any(RESULT in t for t in _plain(fake_telegram)))
        await _wait(runtime, lambda: _background(runtime).finished == 1)
        fake_telegram.message("what did it find?")
        await fake_telegram.wait_for(lambda: "echo: what did it find?" in _plain(fake_telegram))
        parent = tmp_path / "workspace" / "sessions" / "telegram:42.jsonl"
        lines = _lines(parent)
    assert sum(RESULT in t for t in _plain(fake_telegram)) == 1
    stored = [m for m in lines if RESULT in str(m.get("content"))]
    assert len(stored) == 1 and stored[0]["role"] == "assistant"
    delivered = {m.get("reply_id") for m in lines if m.get("_type") == "delivered"}
    assert stored[0]["reply_id"] in delivered
    last = [r for r in fake_llm.requests if _chat(r)][-1]
    assert any(RESULT in str(m.get("content")) for m in last["messages"])
    background = next(r for r in fake_llm.requests if is_background(r))
    names = {t["function"]["name"] for t in background["tools"]}
    assert "read_file" in names and not names & {"spawn", "schedule", "exec"}
    own = list((tmp_path / "workspace" / "sessions").glob("subagent:*.jsonl"))
    assert len(own) == 1 and TASK in own[0].read_text(encoding="utf-8")
    assert describe_listed(tmp_path / "state") == "subagents:  none running"


async def test_a_spawn_beyond_max_running_is_refused_with_why(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """With max_running 1 and one background agent running, a second spawn is refused, and the
    model reads why."""
    release = asyncio.Event()
    fake_llm.push(tool_call("spawn", {"task": "first long task"}), match=_chat)
    fake_llm.push(text("first started"), match=_chat)
    fake_llm.push(text("first done"), hold=release, match=is_background)
    fake_llm.push(tool_call("spawn", {"task": "second long task"}), match=_chat)
    fake_llm.push(text("second refused"), match=_chat)
    async with gateway(tmp_path, fake_llm, fake_telegram, max_running=1) as runtime:
        fake_telegram.message("start the first")
        await fake_telegram.wait_for(lambda: "first started" in _plain(fake_telegram))
        fake_telegram.message("start the second")
        await fake_telegram.wait_for(lambda: "second refused" in _plain(fake_telegram))
        assert len(_background(runtime).running()) == 1
        release.set()
        await _wait(runtime, lambda: _background(runtime).finished == 1)
    refusal = tool_results([r for r in fake_llm.requests if _chat(r)][-1])[-1]
    assert refusal.startswith("Error: not started: 1 background tasks are running")
    assert "agent.subagents.max_running" in refusal
    assert sum(1 for r in fake_llm.requests if is_background(r)) == 1


async def test_stop_in_the_parent_chat_cancels_its_background_agent(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """/stop cancels the chat's background agent: it is no longer listed, and its result never
    comes to the chat."""
    release = asyncio.Event()
    fake_llm.push(tool_call("spawn", {"task": TASK, "label": "garden"}), match=_chat)
    fake_llm.push(text("started"), match=_chat)
    fake_llm.push(text(RESULT), hold=release, match=is_background)
    async with gateway(tmp_path, fake_llm, fake_telegram) as runtime:
        fake_telegram.message("summarise")
        await fake_telegram.wait_for(lambda: "started" in _plain(fake_telegram))
        await fake_llm.wait_for(lambda: any(is_background(r) for r in fake_llm.requests))
        assert "garden" in describe_listed(tmp_path / "state")
        fake_telegram.message("/stop")
        await fake_telegram.wait_for(lambda: "Stopped 1 background task." in _plain(fake_telegram))
        await _wait(runtime, lambda: not _background(runtime).running())
        release.set()
        fake_telegram.message("/tasks")
        await fake_telegram.wait_for(
            lambda: "No background tasks are running in this chat." in _plain(fake_telegram)
        )
        fake_telegram.message("still there?")  # a turn after the release: the result had its chance
        await fake_telegram.wait_for(lambda: "echo: still there?" in _plain(fake_telegram))
        assert _background(runtime).finished == 0
    assert not any(RESULT in t for t in _plain(fake_telegram))
    assert describe_listed(tmp_path / "state") == "subagents:  none running"


@pytest.mark.parametrize(
    ("who", "memory"),
    [
        ("group", {"groups": "shared"}),
        ("guest", {"guests": "shared"}),
        ("group", {}),
        ("guest", {}),
    ],
)
async def test_a_group_or_a_guest_cannot_spawn(
    tmp_path: Path, fake_llm: FakeLLM, who: str, memory: dict[str, str]
) -> None:
    """A group's or a guest's turn is not offered spawn, even where `shared` gives it the private
    scope, and a call of it by name fails without starting anything."""
    config = build_config(tmp_path / "workspace", fake_llm.url, {"memory": memory})
    group = who == "group"
    message = InboundMessage(
        channel="telegram",
        chat_id="-100" if group else "77",
        sender_id="42" if group else "77",
        text="start a background task",
        is_group=group,
        sender_is_owner=group,  # the owner in a group; a stranger in their own DM
    )
    fake_llm.push(tool_call("spawn", {"task": TASK}))
    fake_llm.push(text("could not"))
    async with open_runtime(config) as runtime:
        reply = await runtime.agent.handle(message)
        assert reply is not None and reply.text == "could not"
        assert not _background(runtime).running()
    first, second = fake_llm.chat_requests()[:2]
    assert "spawn" not in {t["function"]["name"] for t in first.get("tools", [])}
    assert tool_results(second)[-1].startswith("Error: unknown tool 'spawn'")
    assert not any(is_background(r) for r in fake_llm.requests)


async def test_the_owner_is_offered_spawn_only_where_background_agents_can_run(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """The owner's DM is offered spawn; called where no background agents run (a one-shot
    chat), it says why instead of starting one."""
    config = build_config(tmp_path / "workspace", fake_llm.url)
    message = InboundMessage("telegram", "42", "42", "go", sender_is_owner=True)
    fake_llm.push(tool_call("spawn", {"task": TASK}))
    fake_llm.push(text("ok"))
    async with open_runtime(config) as runtime:
        await runtime.agent.handle(message)
    first, second = fake_llm.chat_requests()[:2]
    assert "spawn" in {t["function"]["name"] for t in first["tools"]}
    assert "only under memgate run or an interactive memgate chat" in tool_results(second)[-1]


async def test_a_background_agent_past_its_limits_tells_the_chat_why_it_stopped(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """One past agent.subagents.timeout, and one past max_turns, each report to the chat that
    they stopped and which limit stopped them."""
    release = asyncio.Event()
    fake_llm.push(tool_call("spawn", {"task": "slow one", "label": "slow"}), match=_chat)
    fake_llm.push(text("slow started"), match=_chat)
    fake_llm.push(text("too late"), hold=release, match=is_background)
    fake_llm.push(tool_call("spawn", {"task": "busy one", "label": "busy"}), match=_chat)
    fake_llm.push(text("busy started"), match=_chat)
    fake_llm.push(tool_call("list_dir", {"path": "."}), match=is_background)
    async with gateway(tmp_path, fake_llm, fake_telegram, timeout=1, max_turns=1) as runtime:
        fake_telegram.message("start the slow one")
        await fake_telegram.wait_for(
            lambda: any(
                "stopped after 1 s (agent.subagents.timeout)" in t for t in _plain(fake_telegram)
            )
        )
        release.set()
        fake_telegram.message("start the busy one")
        await fake_telegram.wait_for(
            lambda: any("(stopped after 1 model calls" in t for t in _plain(fake_telegram))
        )
        await _wait(runtime, lambda: _background(runtime).finished == 2)
    assert not any("too late" in t for t in _plain(fake_telegram))


async def test_a_background_agents_session_is_consolidated_like_any_other(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Its session (the task, its tool steps, its answer) reaches the message window and is
    consolidated into HISTORY.md, its pointer moved, as any chat's would be."""
    (tmp_path / "workspace" / "notes").mkdir(parents=True)
    fake_llm.push(tool_call("spawn", {"task": TASK, "label": "garden"}), match=_chat)
    fake_llm.push(text("started"), match=_chat)
    fake_llm.push(tool_call("list_dir", {"path": "notes"}), match=is_background)
    fake_llm.push(text(RESULT), match=is_background)
    async with gateway(tmp_path, fake_llm, fake_telegram, {"window": 4}) as runtime:
        fake_telegram.message("summarise")
        await _wait(runtime, lambda: _background(runtime).finished == 1)
        await runtime.consolidator.wait_idle()
        (own,) = (tmp_path / "workspace" / "sessions").glob("subagent:*.jsonl")
        session = await runtime.sessions.get(own.name.removesuffix(".jsonl"))
        assert session.last_consolidated > 0
    chunks = [r for r in fake_llm.consolidation_requests() if TASK in str(r["messages"])]
    assert chunks
    assert "Summary of" in (tmp_path / "workspace" / "memory" / "HISTORY.md").read_text()


async def test_an_interactive_chat_runs_background_tasks_beside_its_prompt(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """In `memgate chat` without the service, spawn returns at once, the prompt answers another
    message while the background call is held, and the result is printed there once."""
    path = tmp_path / "config.yaml"
    path.write_text(
        f"workspace: {tmp_path / 'workspace'}\nstate_dir: {tmp_path / 'state'}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  api_key: sk-pty-secret-0123456789\n  max_retries: 0\n"
    )
    release = asyncio.Event()
    fake_llm.push(tool_call("spawn", {"task": TASK, "label": "garden"}), match=_chat)
    fake_llm.push(text("started it"), match=_chat)
    fake_llm.push(text(RESULT), hold=release, match=is_background)
    env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home")}
    terminal = Terminal(["chat", "--config", str(path)], env)
    try:
        await terminal.wait_for("you> ")
        terminal.type("summarise my garden pages\n")
        await terminal.wait_for("started it")
        await terminal.wait_for("you> ", 2)  # the prompt is back at once
        await fake_llm.wait_for(lambda: any(is_background(r) for r in fake_llm.requests))
        terminal.type("hello there\n")
        await terminal.wait_for("echo: hello there")
        release.set()
        await terminal.wait_for(RESULT)
        none = "subagents:  none running"
        await until(lambda: describe_listed(tmp_path / "state") == none, 10, "the task unlisted")
        terminal.type("\x04")  # Ctrl-D: quit
        assert await asyncio.wait_for(terminal.exit_code(), 30) == 0, terminal.output
    finally:
        terminal.close()
    assert terminal.output.count(RESULT) == 1
