"""The provider's streamed call against the fake server: text pieces, tool calls, usage, fallback."""

from __future__ import annotations

import logging

import pytest

from gateway.llm.provider import OpenAIProvider
from tests.fakes.llm import STREAM_TOKEN, FakeLLM, error, text, tool_call

ASK = [{"role": "user", "content": "hi"}]


def provider(fake: FakeLLM) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=fake.url, api_key="sk-test-key-123456", model="m", timeout=5, max_retries=0
    )


class Pieces:
    """A text sink that keeps what it is given."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)


async def test_text_arrives_in_pieces_with_usage(fake_llm: FakeLLM) -> None:
    """A streamed answer reaches the sink piece by piece, joined it is the answer, usage is kept."""
    answer = "The quick brown fox jumps over the lazy dog. " * 3
    fake_llm.push(text(answer))
    sink = Pieces()
    chat = provider(fake_llm)
    response = await chat.stream_chat(ASK, on_text=sink)
    await chat.close()
    assert len(sink.pieces) == -(-len(answer) // STREAM_TOKEN)
    assert "".join(sink.pieces) == answer == response.content
    request = fake_llm.requests[0]
    assert request["stream"] is True
    assert request["stream_options"] == {"include_usage": True}
    assert response.completion_tokens == len(answer) // 4
    assert response.prompt_tokens > 0
    assert response.finish_reason == "stop"


async def test_tool_call_fragments_are_assembled(fake_llm: FakeLLM) -> None:
    """A tool call streamed in fragments comes out whole; no text reaches the sink."""
    fake_llm.push(tool_call("read_file", {"path": "notes.md"}, call_id="call_7"))
    sink = Pieces()
    chat = provider(fake_llm)
    response = await chat.stream_chat(ASK, [_TOOL], on_text=sink)
    await chat.close()
    assert sink.pieces == []
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_7", "read_file", '{"path": "notes.md"}')
    ]
    assert response.finish_reason == "tool_calls"


async def test_refused_streaming_falls_back_once(
    fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """An endpoint that answers 400 to `stream: true` gets whole calls, with one warning."""
    fake_llm.streaming_unsupported = True
    fake_llm.push(text("first answer"))
    fake_llm.push(text("second answer"))
    chat = provider(fake_llm)
    sinks = [Pieces(), Pieces()]
    with caplog.at_level(logging.WARNING, logger="gateway.llm.provider"):
        first = await chat.stream_chat(ASK, on_text=sinks[0])
        second = await chat.stream_chat(ASK, on_text=sinks[1])
    await chat.close()
    assert (first.content, second.content) == ("first answer", "second answer")
    assert [s.pieces for s in sinks] == [["first answer"], ["second answer"]]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "refused streaming" in warnings[0].getMessage()
    # The streamed try, its whole retry, then straight to a whole call.
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, False, False]


async def test_other_refusals_keep_streaming(fake_llm: FakeLLM) -> None:
    """A refused parameter is learnt as for a whole call, and the answer still streams."""
    fake_llm.push(error(400, "Unsupported parameter: 'max_tokens'; use 'max_completion_tokens'"))
    fake_llm.push(text("adapted"))
    fake_llm.push(text("streamed again"))
    chat = provider(fake_llm)
    sink = Pieces()
    assert (await chat.stream_chat(ASK, on_text=sink)).content == "adapted"
    assert (await chat.stream_chat(ASK, on_text=sink)).content == "streamed again"
    await chat.close()
    assert chat.stream_support.enabled
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, True, True]
    assert "max_completion_tokens" in fake_llm.requests[-1]


async def test_server_error_in_stream_is_an_llm_error(fake_llm: FakeLLM) -> None:
    """A 500 to a streamed call is the same LLMStatusError a whole call raises; no fallback."""
    from gateway.errors import LLMStatusError

    fake_llm.push(error(500, "overloaded"))
    chat = provider(fake_llm)
    with pytest.raises(LLMStatusError) as raised:
        await chat.stream_chat(ASK, on_text=Pieces())
    await chat.close()
    assert raised.value.status == 500
    assert chat.stream_support.enabled
    assert len(fake_llm.requests) == 1


_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "read",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


async def test_refused_tools_are_dropped_and_the_answer_still_streams(
    fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """A model without tool calling: the streamed call goes again without tools, one warning."""
    fake_llm.tools_unsupported = True
    fake_llm.push(text("no tools needed"))
    chat = provider(fake_llm)
    sink = Pieces()
    with caplog.at_level(logging.WARNING, logger="gateway.llm.provider"):
        response = await chat.stream_chat(ASK, [_TOOL], on_text=sink)
    await chat.close()
    assert response.content == "".join(sink.pieces) == "no tools needed"
    assert len(sink.pieces) > 1
    assert [("tools" in r, bool(r.get("stream"))) for r in fake_llm.requests] == [
        (True, True),
        (False, True),
    ]
    assert chat.stream_support.enabled and not chat.tool_support.enabled
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        ('{"choices": [{"index": 0, "delta": {"content": ["x"]}}]}', "content is not text"),
        ('{"choices": [{"index": 0, "delta": {"tool_calls": "f"}}]}', "tool_calls is not a list"),
        ('"just text"', "not a JSON object"),
    ],
    ids=["content-not-text", "calls-not-list", "not-an-object"],
)
async def test_an_unusable_chunk_is_an_llm_error_naming_it(
    fake_llm: FakeLLM, raw: str, cause: str
) -> None:
    """A streamed chunk that is not a completion chunk is an LLMError saying what is wrong."""
    from gateway.errors import LLMError

    fake_llm.push({"raw": raw})
    chat = provider(fake_llm)
    sink = Pieces()
    with pytest.raises(LLMError) as raised:
        await chat.stream_chat(ASK, on_text=sink)
    await chat.close()
    assert "unusable answer from the model" in str(raised.value) and cause in str(raised.value)
    assert sink.pieces == []
