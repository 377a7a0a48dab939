"""Local servers' quirks, against the fake LLM behaving as llama-cpp-python's server does: a stream
cut by `[DONE]` without a finish_reason is asked again and its answer shown and stored once; an
error event after HTTP 200 is a short message and stores no answer; tool arguments with raw
newlines are taken."""

from __future__ import annotations

import json

import pytest

from channels.terminal import Printer
from gateway.agent.turn_notes import RESTART_NOTE
from gateway.errors import LLMBrokenStreamError
from gateway.llm.arguments import valid_arguments
from gateway.llm.provider import OpenAIProvider
from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import (
    FakeLLM,
    cut,
    is_consolidation,
    raw_newlines,
    stream_error,
    text,
    tool_call,
)
from tests.fakes.telegram_api import FakeTelegram, parse_html
from tests.fakes.telegram_harness import agent_channel, running

pytestmark = [
    # PTB 22 warns that RetryAfter.retry_after will become a timedelta (see test_telegram.py).
    pytest.mark.filterwarnings(
        "ignore:Deprecated since version .*attribute `retry_after`"
        ":telegram.warnings.PTBDeprecationWarning"
    ),
]

ASK = [{"role": "user", "content": "hi"}]
GROUP = -100123
ANSWER = "A local model writes this answer a few characters at a time, and it is whole. " * 6


class Pieces:
    """A text sink that keeps what it is given, and each restart it is told of."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.events.append(piece)

    async def restart(self) -> None:
        self.events.append("<restart>")


def provider(fake: FakeLLM) -> OpenAIProvider:
    return OpenAIProvider(base_url=fake.url, api_key="sk-test", model="m", timeout=5, max_retries=0)


def assistant_lines(runtime: Runtime, key: str) -> list[str]:
    path = runtime.sessions.path_for(key)
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return [line["content"] for line in lines if line.get("role") == "assistant"]


async def test_a_cut_stream_is_asked_again_and_the_sink_starts_over(fake_llm: FakeLLM) -> None:
    """`[DONE]` without a finish_reason: the sink is told to start over, the stream asked again."""
    fake_llm.push(cut(ANSWER, 40))
    fake_llm.push(text(ANSWER))
    sink = Pieces()
    chat = provider(fake_llm)
    response = await chat.stream_chat(ASK, on_text=sink, on_restart=sink.restart)
    await chat.close()
    assert response.content == ANSWER and response.finish_reason == "stop"
    restart = sink.events.index("<restart>")
    assert "".join(sink.events[:restart]) == ANSWER[:40]
    assert "".join(sink.events[restart + 1 :]) == ANSWER
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, True]


async def test_a_stream_cut_twice_is_asked_whole(fake_llm: FakeLLM) -> None:
    """Cut again on the second try: the third request is not streamed and its answer counts."""
    fake_llm.push(cut(ANSWER, 40))
    fake_llm.push(cut(ANSWER, 0))
    fake_llm.push(text(ANSWER))
    sink = Pieces()
    chat = provider(fake_llm)
    response = await chat.stream_chat(ASK, on_text=sink, on_restart=sink.restart)
    await chat.close()
    assert response.content == ANSWER
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, True, False]
    assert sink.events.count("<restart>") == 1  # the second cut had shown nothing
    assert sink.events[-1] == ANSWER


async def test_an_error_event_after_200_names_what_the_server_said(fake_llm: FakeLLM) -> None:
    """`data: {"error": …}` inside a stream is an LLMBrokenStreamError with the server's words."""
    fake_llm.push(stream_error("llama_decode returned -3", after="Half an ans"))
    chat = provider(fake_llm)
    with pytest.raises(LLMBrokenStreamError) as raised:
        await chat.stream_chat(ASK, on_text=Pieces())
    await chat.close()
    assert str(raised.value) == "the server broke off: llama_decode returned -3"
    assert len(fake_llm.requests) == 1


async def test_a_cut_draft_ends_as_the_whole_answer_once(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """In a DM the drafts show the cut text, then the answer anew (never the two run together);
    one message then holds the whole answer, stored once."""
    fake_llm.stream_rate = 50
    fake_llm.push(cut(ANSWER, 400))
    fake_llm.push(text(ANSWER))
    async with running(agent_channel(fake_telegram, runtime)):
        fake_telegram.message("tell me")
        await fake_telegram.wait_sent(1)
    drafts = [d["text"] for d in fake_telegram.drafts(42)]
    assert any(len(d) < 400 for d in drafts) and any(len(d) > 400 for d in drafts)
    assert all(ANSWER.startswith(d) or d == RESTART_NOTE for d in drafts)
    assert fake_telegram.shown(42) == [parse_html(ANSWER.strip())]
    assert assistant_lines(runtime, "telegram:42") == [ANSWER.strip()]


async def test_a_cut_group_message_is_edited_into_the_whole_answer(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """In a group the message sent with the cut text is edited into the whole answer: one message."""
    fake_llm.stream_rate = 50
    fake_llm.push(cut(ANSWER, 300))
    fake_llm.push(text(ANSWER))
    async with running(agent_channel(fake_telegram, runtime, group_policy="open")):
        fake_telegram.message("tell me", chat_id=GROUP)
        whole = parse_html(ANSWER.strip())
        await fake_telegram.wait_for(lambda: fake_telegram.shown(GROUP) == [whole])
        await fake_llm.wait_for(lambda: len(fake_llm.requests) == 2)
    [first] = fake_telegram.sent(GROUP)
    assert ANSWER.startswith(first["text"]) and len(first["text"]) < len(ANSWER.strip())
    edits = [c.params["text"] for c in fake_telegram.calls_to("editMessageText")]
    assert all(ANSWER.startswith(e) or e == RESTART_NOTE for e in edits)
    assert fake_telegram.shown(GROUP) == [whole]
    assert assistant_lines(runtime, f"telegram:{GROUP}") == [ANSWER.strip()]


async def test_the_terminal_prints_the_whole_answer_once_after_a_note(
    runtime: Runtime, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the terminal the cut text stays (printed is printed), a note follows, then the whole
    answer once; nothing is left to print at the end."""
    fake_llm.push(cut(ANSWER, 100))
    fake_llm.push(text(ANSWER))
    printer = Printer()
    reply = await runtime.agent.handle(inbound("tell me"), printer)
    assert reply is not None and reply.text == ANSWER.strip()
    assert printer.rest(reply.text) == ""
    assert capsys.readouterr().out == f"\n{ANSWER[:100]}\n[{RESTART_NOTE}]\n{ANSWER}"
    assert assistant_lines(runtime, "test:42") == [ANSWER.strip()]


async def test_an_error_event_is_a_short_message_and_stores_no_answer(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """The chat reads that the server broke off, and why; the cut text is no stored answer."""
    fake_llm.push(stream_error("out of memory", after="The first words of"))
    async with running(agent_channel(fake_telegram, runtime)):
        fake_telegram.message("tell me")
        await fake_telegram.wait_sent(1)
    assert fake_telegram.shown(42) == [
        "Sorry, I could not answer: the server broke off: out of memory."
    ]
    assert assistant_lines(runtime, "telegram:42") == []


async def test_tool_arguments_with_raw_newlines_are_taken(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A write_file call whose JSON holds a raw newline in a string runs as the model meant it."""
    fake_llm.push(tool_call("write_file", raw_newlines({"path": "list.md", "content": "a\nb\n"})))
    fake_llm.push(text("Written."))
    reply = await runtime.agent.handle(inbound("write a list"))
    assert reply is not None and reply.text == "Written."
    assert (runtime.config.workspace / "list.md").read_text() == "a\nb\n"
    [result] = [m for m in fake_llm.requests[1]["messages"] if m.get("role") == "tool"]
    assert not result["content"].startswith("Error")


async def test_near_json_tool_arguments_are_repaired(runtime: Runtime, fake_llm: FakeLLM) -> None:
    """Single quotes and a trailing comma: repaired, then checked against the tool as any call."""
    fake_llm.push(tool_call("write_file", "{'path': 'q.md', 'content': 'quoted',}"))
    fake_llm.push(text("Done."))
    reply = await runtime.agent.handle(inbound("write it"))
    assert reply is not None and reply.text == "Done."
    assert (runtime.config.workspace / "q.md").read_text() == "quoted"


async def test_forced_save_memory_with_raw_newlines_is_saved(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A forced save_memory whose memory_update holds raw newlines is saved, not failed or raw."""
    memory = "# Memory\n- likes tea\n- lives in Lyon\n"
    fake_llm.push(
        tool_call(
            "save_memory",
            raw_newlines(
                {"history_entry": "[2026-01-01 10:00] Talked\nabout tea.", "memory_update": memory}
            ),
        ),
        match=is_consolidation,
    )
    async with make_runtime({"memory": {"window": 4}}) as runtime:
        for word in ("one", "two", "three"):
            await runtime.agent.handle(inbound(f"message {word}"))
        await runtime.consolidator.wait_idle()
        assert (runtime.config.workspace / "memory" / "MEMORY.md").read_text() == memory
        history = (runtime.config.workspace / "memory" / "HISTORY.md").read_text()
    assert "Talked\nabout tea." in history and "[RAW]" not in history


def output_limit(body: dict[str, object]) -> object:
    return body.get("max_tokens", body.get("max_completion_tokens"))


@pytest.mark.parametrize(
    ("window", "expected"),
    [(128_000, range(5512, 5513)), (4096, range(1000, 4096 - 1024))],
    ids=["large-context", "4096-context"],
)
async def test_consolidation_may_write_memory_at_its_cap_whatever_replies_may(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, window: int, expected: range
) -> None:
    """llm.max_tokens 256 bounds replies; consolidation may write MEMORY.md at its cap (4,000)
    plus the entry, within what the context leaves after the prompt."""
    settings = {"llm": {"max_tokens": 256, "context_window": window}, "memory": {"window": 4}}
    async with make_runtime(settings) as runtime:
        for word in ("one", "two", "three"):
            await runtime.agent.handle(inbound(f"message {word}"))
        await runtime.consolidator.wait_idle()
    [consolidation] = fake_llm.consolidation_requests()
    assert output_limit(consolidation) in expected
    assert {output_limit(r) for r in fake_llm.chat_requests()} == {256}


def test_arguments_cut_at_the_output_limit_are_not_completed() -> None:
    """A call that hit its output limit keeps its broken JSON (reported, not saved as whole);
    raw control characters are still taken."""
    shortened = '{"memory_update": "# Memory\\n- likes tea\\n- lives in'
    assert valid_arguments(shortened, cut=True) == shortened
    assert json.loads(valid_arguments(shortened)) == {
        "memory_update": "# Memory\n- likes tea\n- lives in"
    }
    raw = '{"memory_update": "a\nb"}'
    assert json.loads(valid_arguments(raw, cut=True)) == {"memory_update": "a\nb"}
