"""The terminal prints an answer as the agent writes it, and a stopped one with its mark."""

from __future__ import annotations

import asyncio

import pytest

from channels.terminal import Printer, TerminalChannel
from gateway.service.app import Runtime
from tests.fakes.llm import FakeLLM, text, tool_call


class WatchedPrinter(Printer):
    """The terminal's printer, telling the test when enough of the answer is on the screen."""

    def __init__(self, enough: int) -> None:
        super().__init__()
        self.length = 0
        self.enough = asyncio.Event()
        self._wanted = enough

    async def write(self, text: str) -> None:
        await super().write(text)
        self.length += len(text)
        if self.length >= self._wanted:
            self.enough.set()


async def test_answer_is_printed_as_it_is_written(
    runtime: Runtime, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each piece is printed as it arrives, a tool note on its own line; nothing is printed twice."""
    (runtime.config.workspace / "notes.md").write_text("tea")
    fake_llm.push(tool_call("read_file", {"path": "notes.md"}))
    fake_llm.push(text("You like tea, as your notes say."))
    terminal = TerminalChannel(runtime.agent.handle)
    printer = Printer()
    reply = await runtime.agent.handle(terminal.inbound("what do I like?"), printer)
    assert reply is not None
    assert printer.rest(reply.text) == ""
    assert capsys.readouterr().out == "\n[reading notes.md…]\nYou like tea, as your notes say."


async def test_stopped_answer_keeps_what_was_printed(
    runtime: Runtime, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    """/stop (Ctrl-C) mid-answer: what was printed stays; only the "(stopped)" mark is added."""
    fake_llm.stream_rate = 50
    fake_llm.push(text("word " * 400))
    terminal = TerminalChannel(runtime.agent.handle)
    printer = WatchedPrinter(enough=40)
    answer = asyncio.create_task(runtime.agent.handle(terminal.inbound("write a lot"), printer))
    await asyncio.wait_for(printer.enough.wait(), 10)
    await runtime.agent.handle(terminal.inbound("/stop"))
    reply = await answer
    assert reply is not None
    assert printer.rest(reply.text) == "\n\n(stopped)"
    printed = capsys.readouterr().out
    assert reply.text.startswith(printed.strip())
