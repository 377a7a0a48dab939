"""The agent loop against the fake LLM: storage, prompts, tools, errors and concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import pytest

import gateway.agent.context
from gateway.cli.status import describe
from gateway.service.app import Runtime
from memory.sessions.file import parse_session_bytes
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import (
    FakeLLM,
    consolidation_reply,
    error,
    is_consolidation,
    text,
    tool_call,
)


def session_lines(runtime: Runtime, key: str = "test:42") -> list[dict[str, Any]]:
    path = runtime.sessions.path_for(key)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


async def test_one_turn_writes_metadata_user_and_assistant(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """One turn appends exactly metadata, user and assistant lines; a new process replays them."""
    fake_llm.push(text("Hi Ada, nice to meet you."))
    async with make_runtime() as runtime:
        reply = await runtime.agent.handle(inbound("My name is Ada."))
        assert reply is not None and reply.text == "Hi Ada, nice to meet you."
        lines = session_lines(runtime)
    assert [line.get("_type", line.get("role")) for line in lines] == [
        "metadata",
        "user",
        "assistant",
    ]
    assert lines[0]["key"] == "test:42" and lines[0]["version"] == 1
    assert "+00:00" in lines[0]["created_at"]
    assert lines[1]["content"] == "My name is Ada."  # no runtime block stored
    assert all("timestamp" in line for line in lines[1:])

    async with make_runtime() as fresh:
        await fresh.agent.handle(inbound("What is my name?"))
    replayed = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in replayed] == ["system", "user", "assistant", "user"]
    assert replayed[1]["content"] == "My name is Ada."
    assert replayed[2]["content"] == "Hi Ada, nice to meet you."
    assert "What is my name?" in replayed[3]["content"]


class DayLater(datetime):
    """The clock the prompt builder reads, a day ahead once `passed` is set (no sleeping)."""

    passed = False

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> DayLater:
        now = datetime.now(tz) + (timedelta(days=1) if cls.passed else timedelta())
        return cls.fromtimestamp(now.timestamp(), tz)


async def test_memory_in_system_prompt_history_not_and_prompt_is_stable(
    runtime: Runtime, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MEMORY.md is in the system prompt, HISTORY.md is not, and the prompt is byte-stable."""
    monkeypatch.setattr(gateway.agent.context, "datetime", DayLater)
    runtime.memory.memory_md.write_text("# Long-term Memory\n\nUser likes green tea.\n")
    runtime.memory.history_md.write_text("[2026-01-01 10:00] Talked about SECRET-HISTORY.\n\n")
    await runtime.agent.handle(inbound("first"))
    monkeypatch.setattr(DayLater, "passed", True)
    await runtime.agent.handle(inbound("second"))
    first, second = fake_llm.requests[0]["messages"], fake_llm.requests[1]["messages"]
    assert first[-1]["content"] != second[-1]["content"]  # the time moved on between the turns
    assert first[0]["role"] == "system"
    assert "User likes green tea." in first[0]["content"]
    assert all("SECRET-HISTORY" not in json.dumps(r["messages"]) for r in fake_llm.requests)
    assert first[0]["content"] == second[0]["content"]
    assert "[memgate runtime context" in first[-1]["content"]
    assert "time:" not in first[0]["content"]


async def test_tool_call_and_result_are_stored_and_paired(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A read_file call and its result are stored; later requests never hold an orphan result."""
    (runtime.config.workspace / "notes.txt").write_text("the answer is 42")
    fake_llm.push(tool_call("read_file", {"path": "notes.txt"}, call_id="call_a"))
    fake_llm.push(text("It says the answer is 42."))
    reply = await runtime.agent.handle(inbound("What does notes.txt say?"))
    assert reply is not None and reply.text == "It says the answer is 42."
    roles = [line.get("role") for line in session_lines(runtime)[1:]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    tool_line = session_lines(runtime)[3]
    assert tool_line["tool_call_id"] == "call_a" and tool_line["content"] == "the answer is 42"
    second_call = fake_llm.requests[1]["messages"]
    assert second_call[-1] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "name": "read_file",
        "content": "the answer is 42",
    }

    await runtime.agent.handle(inbound("thanks"))
    messages = fake_llm.requests[-1]["messages"]
    called = {c["id"] for m in messages for c in m.get("tool_calls", [])}
    results = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert results == called == {"call_a"}


async def test_file_tools_cannot_leave_the_workspace(
    runtime: Runtime, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """`..`, absolute paths and symlinks out of the workspace all return errors to the model."""
    outside = tmp_path / "outside.txt"
    outside.write_text("TOP-SECRET-OUTSIDE")
    (runtime.config.workspace / "link.txt").symlink_to(outside)
    (runtime.config.workspace / "linkdir").symlink_to(tmp_path)
    attempts = ["../outside.txt", str(outside), "link.txt", "linkdir/outside.txt"]
    for index, path in enumerate(attempts):
        fake_llm.push(tool_call("read_file", {"path": path}, call_id=f"c{index}"))
    fake_llm.push(text("I cannot read those."))
    await runtime.agent.handle(inbound("read the files"))
    fake_llm.push(tool_call("write_file", {"path": "../evil.txt", "content": "x"}))
    fake_llm.push(text("done"))
    await runtime.agent.handle(inbound("write outside"))
    await runtime.agent.handle(inbound("anything else?"))

    results = [line for line in session_lines(runtime) if line.get("role") == "tool"]
    assert len(results) == 5
    assert all(r["content"].startswith("Error:") for r in results)
    assert not (tmp_path / "evil.txt").exists()
    for request in fake_llm.requests:
        assert "TOP-SECRET-OUTSIDE" not in json.dumps(request["messages"])


async def test_llm_error_and_timeout_reply_briefly_and_store_nothing_bad(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A 500 or a timeout gives a short reply; the file stays valid with no error text stored."""
    async with make_runtime({"llm": {"timeout": 0.5}}) as runtime:
        fake_llm.push(error(500, "internal meltdown"))
        reply = await runtime.agent.handle(inbound("hello"))
        assert reply is not None and "HTTP 500" in reply.text and len(reply.text) < 120
        fake_llm.push(text("late"), delay=3)
        reply = await runtime.agent.handle(inbound("hello again"))
        assert reply is not None and "did not answer in time" in reply.text
        data = runtime.sessions.path_for("test:42").read_bytes()
    loaded = parse_session_bytes(data)
    assert [m["role"] for m in loaded.messages] == ["user", "user"]
    assert "meltdown" not in data.decode() and "Sorry" not in data.decode()


async def test_twenty_sessions_at_once_each_in_order(runtime: Runtime, fake_llm: FakeLLM) -> None:
    """20 sessions receiving messages at once are all answered, each session's turns in order."""
    fake_llm.delay = 0.05

    async def chat(index: int) -> list[str]:
        replies = []
        for turn in range(3):
            reply = await runtime.agent.handle(inbound(f"s{index} t{turn}", chat_id=str(index)))
            assert reply is not None
            replies.append(reply.text)
        return replies

    all_replies = await asyncio.gather(*(chat(i) for i in range(20)))
    for index, replies in enumerate(all_replies):
        assert [r.rsplit(" ", 1)[-1] for r in replies] == ["t0", "t1", "t2"]
        users = [
            m["content"] for m in session_lines(runtime, f"test:{index}") if m.get("role") == "user"
        ]
        assert users == [f"s{index} t0", f"s{index} t1", f"s{index} t2"]


async def test_concurrent_messages_in_one_session_keep_their_order(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """Messages sent to one session at once are answered one after the other, in arrival order."""
    fake_llm.delay = 0.02
    await asyncio.gather(*(runtime.agent.handle(inbound(f"m{i}")) for i in range(8)))
    lines = [m for m in session_lines(runtime) if m.get("role")]
    assert [m["content"] for m in lines if m["role"] == "user"] == [f"m{i}" for i in range(8)]
    assert [m["role"] for m in lines] == ["user", "assistant"] * 8


async def test_stop_cancels_the_running_turn_and_keeps_the_message(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/stop cancels the chat's running turn; the user message stays in the session."""
    hold = asyncio.Event()
    fake_llm.push(text("never delivered"), hold=hold)
    turn = asyncio.ensure_future(runtime.agent.handle(inbound("long question")))
    await fake_llm.wait_for_requests(1)
    stop = await runtime.agent.handle(inbound("/stop"))
    assert stop is not None and stop.text == "Stopped."
    assert await turn is None
    hold.set()
    roles = [m.get("role") for m in session_lines(runtime)[1:]]
    assert roles == ["user"]
    nothing = await runtime.agent.handle(inbound("/stop"))
    assert nothing is not None and nothing.text == "Nothing to stop."


async def test_new_rotates_the_session_to_the_archive(runtime: Runtime, fake_llm: FakeLLM) -> None:
    """/new moves the file to sessions/archive/ and the next turn starts a fresh session."""
    await runtime.agent.handle(inbound("remember me"))
    reply = await runtime.agent.handle(inbound("/new"))
    assert reply is not None and reply.text == "New session started."
    archived = list((runtime.config.workspace / "sessions" / "archive").glob("*.jsonl"))
    assert len(archived) == 1 and "remember me" in archived[0].read_text()
    assert not runtime.sessions.path_for("test:42").exists()
    await runtime.agent.handle(inbound("hello again"))
    last = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"]


async def test_help_and_status_answer_without_the_model(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/help and /status are answered locally; /status reports sizes and the model."""
    await runtime.agent.handle(inbound("hello"))
    before = len(fake_llm.requests)
    help_reply = await runtime.agent.handle(inbound("/help"))
    status = await runtime.agent.handle(inbound("/status@memgate_bot"))
    assert help_reply is not None and "/new" in help_reply.text
    assert status is not None and "Messages: 2" in status.text and "gpt-4o-mini" in status.text
    assert "Not yet in memory: 2 messages" in status.text
    assert len(fake_llm.requests) == before


async def test_unknown_tool_and_bad_arguments_go_back_to_the_model(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """An unknown tool or invalid JSON arguments become error text for the model, not a crash."""
    fake_llm.push(tool_call("launch_rockets", {}))
    fake_llm.push(tool_call("read_file", "{not json"))
    fake_llm.push(text("sorry"))
    reply = await runtime.agent.handle(inbound("go"))
    assert reply is not None and reply.text == "sorry"
    results = [m["content"] for m in session_lines(runtime) if m.get("role") == "tool"]
    assert results[0].startswith("Error: unknown tool") and "not valid JSON" in results[1]


async def test_max_iterations_ends_with_a_clear_message(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A model that keeps calling tools is stopped after agent.max_iterations."""
    fake_llm.default = lambda body: (
        consolidation_reply(body)
        if is_consolidation(body)
        else tool_call("list_dir", {"path": "."})
    )
    async with make_runtime({"agent": {"max_iterations": 3}}) as runtime:
        reply = await runtime.agent.handle(inbound("loop forever"))
    assert reply is not None and "3 tool steps" in reply.text
    assert len(fake_llm.chat_requests()) == 3


async def test_history_is_trimmed_to_the_budget(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """With a small context window the oldest messages are left out of the prompt, not the file."""
    overrides = {"llm": {"context_window": 4096, "max_tokens": 1024}, "memory": {"window": 10_000}}
    async with make_runtime(overrides) as runtime:
        for index in range(40):
            await runtime.agent.handle(inbound(f"message {index} " + "lorem ipsum " * 40))
        budget = runtime.config.llm.budget
        system = fake_llm.requests[-1]["messages"][0]["content"]
        for request in fake_llm.requests:  # chat and consolidation prompts alike
            total = sum(runtime.counter.count_message(m) for m in request["messages"])
            total += runtime.counter.count_tools(request["tools"])
            assert total <= budget
        last = fake_llm.requests[-1]["messages"]
        assert last[1]["role"] == "user" and "message 0 " not in json.dumps(last)
        stored = [m for m in session_lines(runtime) if m.get("role")]
        assert len(stored) == 80  # the file keeps every message
        assert system


async def test_a_replayed_message_is_stored_once(runtime: Runtime, fake_llm: FakeLLM) -> None:
    """A channel replaying a message it already handed over and answered stores it once and
    answers nothing."""
    first = await runtime.agent.handle(inbound("hello", message_id="m-1"))
    assert first is not None
    await first.sent()  # the channel's send went through
    again = await runtime.agent.handle(inbound("hello", message_id="m-1"))
    assert again is None
    users = [m for m in session_lines(runtime) if m.get("role") == "user"]
    assert [u["message_id"] for u in users] == ["m-1"]
    assert len(fake_llm.chat_requests()) == 1


async def test_a_replayed_message_whose_answer_was_never_sent_gets_the_stored_answer(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A replay of a message answered but never marked delivered returns the stored answer again,
    without a model call, and once it is sent a further replay returns nothing."""
    first = await runtime.agent.handle(inbound("hello", message_id="m-1"))
    assert first is not None  # the process dies before the channel sends it
    again = await runtime.agent.handle(inbound("hello", message_id="m-1"))
    assert again is not None and again.text == first.text == "echo: hello"
    assert len(fake_llm.chat_requests()) == 1
    await again.sent()
    assert await runtime.agent.handle(inbound("hello", message_id="m-1")) is None
    marks = [r for r in session_lines(runtime) if r.get("_type") == "delivered"]
    assert len(marks) == 1
    assert b"memgate_replies_resent_total 1.0" in runtime.metrics.render()


async def test_reasoning_model_parameters_are_learned_from_a_400(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A model refusing max_tokens or temperature is retried once with what it accepts."""
    fake_llm.push(
        error(
            400,
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
        )
    )
    fake_llm.push(
        error(400, "Unsupported value: 'temperature' does not support 0.7 with this model.")
    )
    reply = await runtime.agent.handle(inbound("hello"))
    assert reply is not None and reply.text == "echo: hello"
    first, second, third = fake_llm.chat_requests()
    assert "max_tokens" in first and "max_completion_tokens" not in first
    assert "max_completion_tokens" in second and "temperature" in second
    assert "max_completion_tokens" in third and "temperature" not in third
    await runtime.agent.handle(inbound("again"))
    assert "max_completion_tokens" in fake_llm.chat_requests()[-1]


async def test_a_replayed_message_killed_before_its_answer_is_answered_once(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A replay of a message stored but never answered (the process died) is answered now."""
    hold = asyncio.Event()
    fake_llm.push(text("lost with the process"), hold=hold)
    turn = asyncio.ensure_future(runtime.agent.handle(inbound("are you there?", message_id="m-9")))
    await fake_llm.wait_for_requests(1)
    turn.cancel()  # the process dies mid-turn: the user line is on disk, no answer is
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    hold.set()
    reply = await runtime.agent.handle(inbound("are you there?", message_id="m-9"))
    assert reply is not None and reply.text == "echo: are you there?"
    roles = [m.get("role") for m in session_lines(runtime)[1:]]
    assert roles == ["user", "assistant"]
    assert fake_llm.chat_requests()[-1]["messages"][-1]["content"].endswith("are you there?")
    assert len(fake_llm.chat_requests()[-1]["messages"]) == 2  # system + this message, once


async def test_a_tool_call_is_stored_before_the_tool_runs(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """While a tool runs, its call is already in the session file, and `memgate status` counts
    the turn as interrupted; a replay then answers it without running the tool again."""
    (runtime.config.workspace / "notes.md").write_text("some notes")
    fake_llm.push(tool_call("read_file", {"path": "notes.md"}))
    hold = asyncio.Event()
    fake_llm.push(text("read them"), hold=hold)
    turn = asyncio.ensure_future(runtime.agent.handle(inbound("read my notes", message_id="m-5")))
    await fake_llm.wait_for_requests(2)
    turn.cancel()  # the process dies before the second model call
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    hold.set()
    roles = [m.get("role") for m in session_lines(runtime)[1:]]
    assert roles == ["user", "assistant", "tool"]
    assert "0 answer(s) owed, 1 interrupted turn(s)" in describe(runtime.config)
    fake_llm.push(text("your notes say: some notes"))
    reply = await runtime.agent.handle(inbound("read my notes", message_id="m-5"))
    assert reply is not None and reply.text == "your notes say: some notes"
    resumed = fake_llm.chat_requests()[-1]["messages"]
    assert resumed[-1] == {
        "role": "tool",
        "tool_call_id": resumed[-2]["tool_calls"][0]["id"],
        "name": "read_file",
        "content": "some notes",
    }
    assert "1 answer(s) owed, 0 interrupted turn(s)" in describe(runtime.config)
    await reply.sent()
    assert "0 answer(s) owed, 0 interrupted turn(s)" in describe(runtime.config)
    assert b"memgate_turns_resumed_total 1.0" in runtime.metrics.render()


async def test_a_failure_outside_the_model_is_one_log_line_and_a_reply_naming_it(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """A session file that cannot be read ends the turn in an apology naming the error, not a raise."""
    runtime.sessions.path_for("test:42").mkdir(parents=True)
    with caplog.at_level(logging.DEBUG, logger="gateway.agent.loop"):
        reply = await runtime.agent.handle(inbound("hello"))
    assert reply is not None and reply.failed and reply.on_sent is None
    assert reply.text.startswith("Sorry, something went wrong while answering (IsADirectoryError")
    loud = [r for r in caplog.records if r.levelno >= logging.INFO and "turn failed" in r.message]
    assert len(loud) == 1 and "IsADirectoryError" in loud[0].message
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.INFO)
    assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG)


async def test_a_group_apology_names_the_kind_of_failure_only(runtime: Runtime) -> None:
    """In a group the apology names the error's type, never its text (paths, settings)."""
    key_path = runtime.sessions.path_for("test:-5")
    key_path.mkdir(parents=True)
    reply = await runtime.agent.handle(inbound("hello", chat_id="-5", is_group=True))
    assert reply is not None and reply.failed
    assert reply.text == (
        "Sorry, something went wrong while answering (IsADirectoryError). "
        "The error has been logged."
    )
