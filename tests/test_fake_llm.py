"""The fake LLM server speaks the protocol the real openai SDK expects."""

from __future__ import annotations

import openai
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from tests.fakes.llm import FakeLLM, error, text, tool_call


async def test_sdk_parses_text_and_tool_calls(fake_llm: FakeLLM) -> None:
    """The real SDK reads a scripted text answer and a scripted tool call."""
    client = openai.AsyncOpenAI(base_url=fake_llm.url, api_key="k", max_retries=0)
    fake_llm.push(text("hello"))
    fake_llm.push(tool_call("read_file", {"path": "x"}))
    first = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    second = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert first.choices[0].message.content == "hello"
    [call] = second.choices[0].message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.function.name == "read_file"
    assert call.function.arguments == '{"path": "x"}'
    assert len(fake_llm.requests) == 2
    await client.close()


async def test_sdk_sees_scripted_errors(fake_llm: FakeLLM) -> None:
    """A scripted 500 reaches the SDK as an InternalServerError."""
    client = openai.AsyncOpenAI(base_url=fake_llm.url, api_key="k", max_retries=0)
    fake_llm.push(error(500))
    try:
        await client.chat.completions.create(model="m", messages=[])
    except openai.InternalServerError as exc:
        assert exc.status_code == 500
    else:
        raise AssertionError("no error raised")
    await client.close()
