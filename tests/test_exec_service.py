"""exec under `memgate run`: the request reaches the owner's Telegram chat or attached terminal."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from tests.conftest import memgate_run, service_config
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results
from tests.fakes.telegram_api import FakeTelegram
from tests.sandboxing import needs_bwrap, prepare_workspace
from tests.terminal import Terminal

pytestmark = [needs_bwrap, pytest.mark.timeout(120)]


async def test_the_owner_approves_on_telegram_while_the_turn_waits(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """The request is sent to the owner's DM; their /approve ID, a message of the same chat
    arriving while the turn waits, is answered and the command runs."""
    workspace = prepare_workspace(tmp_path)
    config = service_config(tmp_path, fake_llm, fake_telegram)
    config.write_text(config.read_text() + "tools:\n  exec:\n    enabled: true\n")
    fake_llm.push(tool_call("exec", {"command": "touch via-telegram.txt"}))
    fake_llm.push(text("made it"), match=lambda body: bool(tool_results(body)))

    def texts() -> list[str]:
        return [str(params.get("text", "")) for params in fake_telegram.sent(42)]

    async with memgate_run(config, tmp_path):
        fake_telegram.message("make the file")
        await fake_telegram.wait_for(lambda: any("Run this command?" in t for t in texts()))
        asked = next(p for p in fake_telegram.sent(42) if "Run this command?" in p["text"])
        assert "touch via-telegram.txt" in asked["text"]
        [approve, _] = asked["reply_markup"]["inline_keyboard"][0]  # typing it works as well
        found = re.fullmatch(r"/approve (\w+)", approve["callback_data"])
        assert found is not None
        assert not (workspace / "via-telegram.txt").exists()
        fake_telegram.message(f"/approve {found.group(1)}")
        await fake_telegram.wait_for(lambda: any("made it" in t for t in texts()))
    assert any(t.startswith("Approved") for t in texts())
    assert (workspace / "via-telegram.txt").exists()


async def test_a_terminal_attached_to_the_service_shows_the_request_and_approves(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """`memgate chat` attached to `memgate run` is no channel a message can reach: the request
    shows in the answer being written, and /approve typed there runs the command."""
    workspace = prepare_workspace(tmp_path)
    config = service_config(tmp_path, fake_llm, fake_telegram)
    config.write_text(config.read_text() + "tools:\n  exec:\n    enabled: true\n")
    fake_llm.push(tool_call("exec", {"command": "touch via-attached.txt"}))
    fake_llm.push(text("made it"), match=lambda body: bool(tool_results(body)))
    async with memgate_run(config, tmp_path):
        env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home")}
        terminal = Terminal(["chat", "--config", str(config)], env)
        try:
            await terminal.wait_for("attached to the running service")
            await terminal.wait_for("you> ")
            terminal.type("make the file\n")
            await terminal.wait_for("Run this command?")
            await terminal.wait_for(" or /deny ")
            found = re.search(r"/approve (\w+) or", terminal.output)
            assert found is not None, terminal.output
            terminal.type(f"/approve {found.group(1)}\n")
            await terminal.wait_for("made it")
            terminal.type("\x04")  # Ctrl-D: quit
            assert await asyncio.wait_for(terminal.exit_code(), 30) == 0, terminal.output
        finally:
            terminal.close()
    assert (workspace / "via-attached.txt").exists(), terminal.output
