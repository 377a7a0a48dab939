"""`memgate chat` beside a running `memgate run`, and Ctrl-C on a pseudo-terminal."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from tests.conftest import (
    IMPORT_TIMES,
    build_config,
    imported,
    memgate,
    memgate_run,
    service_config,
)
from tests.fakes.llm import FakeLLM, text
from tests.fakes.telegram_api import FakeTelegram
from tests.terminal import Terminal

pytestmark = pytest.mark.timeout(120)


async def test_chat_is_answered_by_the_running_service(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """With `memgate run` up, `chat -m` goes through its agent; `status` shows its live figures."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    socket = tmp_path / "state" / "control.sock"
    async with memgate_run(config, tmp_path) as (_, live):
        assert live["channels"] == {"telegram": True}
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600
        fake_llm.push(text("Answered by the service."))
        code, out, err = await memgate(
            "chat", "--config", str(config), "-m", "hello", home=tmp_path, env=IMPORT_TIMES
        )
        assert (code, out.strip()) == (0, "Answered by the service."), err
        # Attached, the terminal needs neither the agent nor the model's SDK (a quick start).
        assert "gateway.agent.loop" not in imported(err) and "openai" not in imported(err)
        assert len(fake_llm.chat_requests()) == 1
        session = tmp_path / "workspace" / "sessions" / "terminal:local.jsonl"
        turns = [json.loads(line) for line in session.read_text().splitlines()]
        said = [(t.get("role"), t.get("content")) for t in turns if t.get("role")]
        assert said[-2:] == [("user", "hello"), ("assistant", "Answered by the service.")]
        code, out, _ = await memgate("status", "--config", str(config), home=tmp_path)
        assert code == 0 and "service:    running" in out and "telegram up" in out
    assert not socket.exists()
    code, out, _ = await memgate("status", "--config", str(config), home=tmp_path)
    assert "service:    not running" in out
    code, out, err = await memgate(
        "chat", "--config", str(config), "-m", "alone", home=tmp_path, env=IMPORT_TIMES
    )
    assert (code, out.strip()) == (0, "echo: alone"), err.splitlines()[-5:]  # in-process
    assert "openai" in imported(err)


async def test_ctrl_c_stops_an_answer_and_then_quits(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """^C during a held answer prints "stopped" and gives the prompt back, the message kept; ^C at
    the prompt quits with exit 0."""
    config = build_config(tmp_path / "workspace", fake_llm.url)
    path = tmp_path / "config.yaml"
    path.write_text(
        f"workspace: {config.workspace}\nstate_dir: {config.state_dir}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  api_key: sk-pty-secret-0123456789\n  max_retries: 0\n"
    )
    held = asyncio.Event()
    fake_llm.push(text("never shown"), hold=held)
    env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home")}
    terminal = Terminal(["chat", "--config", str(path)], env)
    try:
        await terminal.wait_for("you> ")
        terminal.type("remember the blue door\n")
        await fake_llm.wait_for_requests(1, "chat")
        terminal.type("\x03")  # ^C, which the terminal turns into SIGINT
        await terminal.wait_for("stopped")
        await terminal.wait_for("you> ", 2)
        held.set()
        terminal.type("\x03")
        assert await terminal.exit_code() == 0, terminal.output
    finally:
        terminal.close()
    assert "never shown" not in terminal.output and "Traceback" not in terminal.output
    session = config.workspace / "sessions" / "terminal:local.jsonl"
    assert "remember the blue door" in session.read_text()


async def test_an_answer_a_restart_kept_from_the_terminal_is_shown_first(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """An answer stored for the terminal but never shown (the service died before writing it) is
    printed before the next answer, once, through the service and in-process alike."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    session = tmp_path / "workspace" / "sessions" / "terminal:local.jsonl"
    session.parent.mkdir(parents=True)

    def keep(answer: str, reply_id: str) -> None:
        # What a kill between storing the answer and writing it to the socket leaves on disk.
        lines = [
            {"role": "user", "content": f"asked before {reply_id}"},
            {"role": "assistant", "content": answer, "reply_id": reply_id},
        ]
        with session.open("a") as file:
            file.writelines(json.dumps(line) + "\n" for line in lines)

    keep("the kept answer", "r1")
    code, out, _ = await memgate("status", "--config", str(config), home=tmp_path)
    assert "delivery:   1 answer(s) owed" in out and "owed: terminal:local (1)" in out
    code, out, err = await memgate("chat", "--config", str(config), "-m", "alone", home=tmp_path)
    assert code == 0, err
    assert out.strip() == "(kept from before a restart)\nthe kept answer\n\necho: alone"
    code, out, err = await memgate("chat", "--config", str(config), "-m", "again", home=tmp_path)
    assert (code, out.strip()) == (0, "echo: again"), err  # shown once

    keep("kept while attached", "r2")
    async with memgate_run(config, tmp_path):
        code, out, err = await memgate(
            "chat", "--config", str(config), "-m", "attached", home=tmp_path
        )
        assert code == 0, err
        assert out.strip() == "(kept from before a restart)\nkept while attached\n\necho: attached"
    code, out, _ = await memgate("status", "--config", str(config), home=tmp_path)
    assert "delivery:   0 answer(s) owed, 0 interrupted turn(s)" in out
