"""A chat attached to the service over the control socket sees the answer as it is written."""

from __future__ import annotations

import asyncio
import json

import pytest

from channels.terminal import Printer, TerminalChannel
from gateway.service.app import Runtime
from gateway.service.control import remote_handler, request
from tests.control_socket import exchange, no_tracebacks, serving
from tests.fakes.llm import FakeLLM, text, tool_call


class Pieces:
    """A `ReplyStream` recording what it is given, and telling the test when the first piece came."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.notes: list[str] = []
        self.first = asyncio.Event()

    async def write(self, text: str) -> None:
        self.pieces.append(text)
        self.first.set()

    async def status(self, note: str) -> None:
        self.notes.append(note)


async def test_attached_chat_sees_the_first_piece_before_the_model_has_finished(
    runtime: Runtime, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """The first piece of a long answer reaches the attached client while the model still writes;
    /stop from another connection then ends it, the pieces shown being the stopped answer's start."""
    fake_llm.stream_rate = 10  # 4 characters a chunk: the whole answer would take 40 s
    fake_llm.push(text("word " * 80))
    terminal = TerminalChannel(runtime.agent.handle)
    async with serving(runtime) as path:
        handler = remote_handler(path)
        stream = Pieces()
        answer = asyncio.ensure_future(handler(terminal.inbound("write a lot"), stream))
        await asyncio.wait_for(stream.first.wait(), 10)
        assert fake_llm.streams == []  # the model's stream has not finished
        await handler(terminal.inbound("/stop"))
        reply = await asyncio.wait_for(answer, 10)
    assert reply is not None and reply.text.endswith("(stopped)")
    assert reply.text.startswith("".join(stream.pieces).strip())
    no_tracebacks(caplog)


async def test_attached_terminal_prints_the_answer_as_the_in_process_chat_does(
    runtime: Runtime, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the socket, the terminal's printer shows the tool note and the text as they come,
    and nothing of the whole reply is left to print twice."""
    (runtime.config.workspace / "notes.md").write_text("tea")
    fake_llm.push(tool_call("read_file", {"path": "notes.md"}))
    fake_llm.push(text("You like tea, as your notes say."))
    terminal = TerminalChannel(runtime.agent.handle)
    async with serving(runtime) as path:
        printer = Printer()
        reply = await remote_handler(path)(terminal.inbound("what do I like?"), printer)
    assert reply is not None and not reply.failed
    assert printer.rest(reply.text) == ""
    assert capsys.readouterr().out == "\n[reading notes.md…]\nYou like tea, as your notes say."


async def test_a_stream_longer_than_the_idle_timeout_is_not_cut(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """The idle timeout is for a silent client, not a slow model: an answer streamed for longer
    than it arrives whole."""
    fake_llm.stream_rate = 40
    fake_llm.push(text("slow " * 30))  # 38 chunks: about a second
    terminal = TerminalChannel(runtime.agent.handle)
    async with serving(runtime, idle_timeout=0.3) as path:
        stream = Pieces()
        reply = await remote_handler(path)(terminal.inbound("take your time"), stream)
    assert reply is not None and not reply.failed
    assert reply.text == ("slow " * 30).strip()
    assert "".join(stream.pieces).strip() == reply.text


async def test_a_client_without_streaming_still_gets_one_answer_line(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A request that does not ask for pieces gets the one answer line it always got; one that
    does gets delta lines first and the same answer on the last line."""
    async with serving(runtime) as path:
        assert await request(path, {"op": "chat", "text": "hi"}) == {
            "text": "echo: hi",
            "failed": False,
        }
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b'{"op": "chat", "text": "again", "stream": "on"}\n')
        await writer.drain()
        async with asyncio.timeout(10):
            lines = [json.loads(line) for line in (await reader.read()).splitlines()]
        writer.close()
        refused = await exchange(path, b'{"op": "chat", "text": "x", "stream": "yes"}\n')
    assert lines[-1] == {"text": "echo: again", "failed": False}
    assert all(set(line) == {"delta"} for line in lines[:-1]) and len(lines) > 1
    assert "".join(line["delta"] for line in lines[:-1]) == "echo: again"
    assert set(refused) == {"error"} and "stream" in refused["error"]
