"""The terminal offers only the commands that work there, and refuses what it cannot do, saying why."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gateway.agent.commands.registry import COMMANDS, help_text
from gateway.service.app import Runtime
from tests.conftest import build_config, inbound
from tests.fakes.llm import FakeLLM, text, tool_call
from tests.terminal import Terminal


async def test_terminal_help_lists_only_what_the_terminal_answers(runtime: Runtime) -> None:
    """/help in the terminal has no /pair (only a chat platform's DM answers it); Telegram's has;
    every command the terminal's /help lists is answered there, none is unknown."""
    terminal = await runtime.agent.handle(inbound("/help", channel="terminal", chat_id="local"))
    telegram = await runtime.agent.handle(inbound("/help", channel="telegram"))
    assert terminal is not None and telegram is not None
    assert "/pair" not in terminal.text and "/pair CODE" in telegram.text
    assert terminal.text == help_text("terminal")
    offered = [line.split(" — ")[0].split()[0] for line in terminal.text.splitlines()[1:]]
    assert offered == [f"/{c.name}" for c in COMMANDS if c.name != "pair"]
    for command in offered:
        if command in ("/new", "/stop"):  # these act; their answers say so
            continue
        reply = await runtime.agent.handle(inbound(command, channel="terminal", chat_id="local"))
        assert reply is not None and "Unknown command" not in reply.text, command


async def test_a_job_made_from_the_terminal_is_refused_with_the_reason(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """The schedule tool refuses in the terminal: nothing could deliver the job's message later,
    and the model is told so (and to schedule from Telegram or Discord); no job is made."""
    fake_llm.push(tool_call("schedule", {"every": "1d", "message": "stretch"}))
    fake_llm.push(text("I cannot from here."))
    reply = await runtime.agent.handle(
        inbound("remind me daily to stretch", channel="terminal", chat_id="local")
    )
    assert reply is not None and reply.text == "I cannot from here."
    result = fake_llm.chat_requests()[-1]["messages"][-1]
    assert result["role"] == "tool"
    assert "no way to deliver a message later" in result["content"]
    assert "Telegram or Discord" in result["content"]
    assert runtime.scheduler.jobs() == []


async def test_stop_typed_during_an_answer_stops_it(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """/stop typed while an answer is being written is read at once and stops that answer (its
    "(stopped)" mark shows), instead of waiting for the end and finding nothing to stop."""
    config = build_config(tmp_path / "workspace", fake_llm.url)
    path = tmp_path / "config.yaml"
    path.write_text(
        f"workspace: {config.workspace}\nstate_dir: {config.state_dir}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  api_key: sk-pty-secret-0123456789\n  max_retries: 0\n"
    )
    fake_llm.stream_rate = 10  # the whole answer would take 60 s
    fake_llm.push(text("word " * 120))
    env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home")}
    terminal = Terminal(["chat", "--config", str(path)], env)
    try:
        await terminal.wait_for("you> ")
        terminal.type("write a lot\n")
        await terminal.wait_for("word word")
        terminal.type("/stop\n")
        await terminal.wait_for("(stopped)")
        await terminal.wait_for("you> ", 2)
        terminal.type("\x04")  # Ctrl-D: quit
        assert await asyncio.wait_for(terminal.exit_code(), 30) == 0, terminal.output
    finally:
        terminal.close()
    assert "Nothing to stop" not in terminal.output and "Traceback" not in terminal.output
    assert fake_llm.streams == []  # the model's stream never ran to its end
