"""A streamed turn: the answer shows as the model writes it, and the session stores it whole."""

from __future__ import annotations

import asyncio
import contextlib
import json

from gateway.service.app import Runtime
from tests.conftest import inbound
from tests.fakes.llm import FakeLLM, text, tool_call


class Shown:
    """A ReplyStream that keeps what a channel would show: the text and the tool notes."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._changed = asyncio.Condition()

    async def write(self, piece: str) -> None:
        self.events.append(("text", piece))
        async with self._changed:
            self._changed.notify_all()

    async def status(self, note: str) -> None:
        self.events.append(("status", note))

    @property
    def text(self) -> str:
        return "".join(piece for kind, piece in self.events if kind == "text")

    async def wait_for_text(self, length: int) -> None:
        async with asyncio.timeout(10), self._changed:
            await self._changed.wait_for(lambda: len(self.text) >= length)


def assistant_lines(runtime: Runtime) -> list[dict[str, object]]:
    path = runtime.sessions.path_for("test:42")
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return [line for line in lines if line.get("role") == "assistant"]


async def test_streamed_answer_is_shown_and_stored_whole(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """The stream gets the answer piece by piece; reply and stored message are the whole text."""
    answer = "Here is a long answer, written a few characters at a time. " * 5
    fake_llm.push(text(answer))
    shown = Shown()
    reply = await runtime.agent.handle(inbound("tell me"), shown)
    assert reply is not None and reply.text == answer.strip()
    assert shown.text == answer
    assert len(shown.events) > 10
    assert [line["content"] for line in assistant_lines(runtime)] == [answer.strip()]
    assert fake_llm.requests[0]["stream"] is True


async def test_plain_handle_does_not_stream(runtime: Runtime, fake_llm: FakeLLM) -> None:
    """Without a stream the model is asked for a whole answer, as before."""
    fake_llm.push(text("whole"))
    reply = await runtime.agent.handle(inbound("hi"))
    assert reply is not None and reply.text == "whole"
    assert "stream" not in fake_llm.requests[0]


async def test_tool_step_shows_a_note_before_the_answer(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """While read_file runs the stream says "reading notes.md…"; then the answer comes."""
    (runtime.config.workspace / "notes.md").write_text("the answer is 42")
    fake_llm.push(tool_call("read_file", {"path": "notes.md"}))
    fake_llm.push(text("It says 42."))
    shown = Shown()
    reply = await runtime.agent.handle(inbound("what do my notes say?"), shown)
    assert reply is not None and reply.text == "It says 42."
    assert shown.events[0] == ("status", "reading notes.md…")
    assert shown.text == "It says 42."


async def test_stop_keeps_the_partial_answer_marked_once(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/stop mid-stream: the part written so far is the reply and is stored once, marked."""
    fake_llm.stream_rate = 50
    fake_llm.push(text("word " * 400))
    shown = Shown()
    turn = asyncio.create_task(runtime.agent.handle(inbound("write a lot"), shown))
    await shown.wait_for_text(40)
    stop = await runtime.agent.handle(inbound("/stop"))
    assert stop is not None and stop.text == "Stopped."
    reply = await turn
    assert reply is not None and not reply.failed
    assert reply.text.endswith("\n\n(stopped)")
    partial = reply.text.removesuffix("\n\n(stopped)")
    assert shown.text.strip() == partial and 39 <= len(partial) < 2000
    assert [line["content"] for line in assistant_lines(runtime)] == [reply.text]
    await reply.sent()  # the channel showed it: no longer owed
    assert await runtime.agent.owed("test", "42", "test:42") == []


async def test_shutdown_mid_stream_stores_no_partial(runtime: Runtime, fake_llm: FakeLLM) -> None:
    """Cancelled by a shutdown (not /stop), a streamed turn stores only the user message."""
    fake_llm.stream_rate = 50
    fake_llm.push(text("word " * 400))
    shown = Shown()
    turn = asyncio.create_task(runtime.agent.handle(inbound("write a lot"), shown))
    await shown.wait_for_text(40)
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    assert assistant_lines(runtime) == []


async def test_message_cut_mid_stream_is_answered_when_replayed(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A stream cut by a crash leaves the user message; replayed, it is answered, stored once."""
    fake_llm.stream_rate = 50
    fake_llm.push(text("word " * 400))
    shown = Shown()
    message = inbound("write a lot", message_id="m1")
    turn = asyncio.create_task(runtime.agent.handle(message, shown))
    await shown.wait_for_text(40)
    turn.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await turn
    fake_llm.stream_rate = 0
    fake_llm.push(text("The whole answer."))
    reply = await runtime.agent.handle(message, Shown())
    assert reply is not None and reply.text == "The whole answer."
    path = runtime.sessions.path_for("test:42")
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    assert [(m["role"], m["content"]) for m in lines] == [
        ("user", "write a lot"),
        ("assistant", "The whole answer."),
    ]
