"""The chat provider reads the model's answer straight from its JSON, keeping the SDK's retries and
the typed errors the replies and the operator's log line are built from."""

from __future__ import annotations

import json

import pytest

from gateway.errors import LLMError, LLMRateLimitError, LLMStatusError
from gateway.llm.provider import OpenAIProvider
from gateway.llm.types import ToolCall
from tests.fakes.llm import FakeLLM, error, text, tool_call


async def test_text_tool_calls_and_usage_are_read(
    provider: OpenAIProvider, fake_llm: FakeLLM
) -> None:
    """Content, every tool call (id, name, arguments as sent), finish reason and usage come back."""
    fake_llm.push(text("hello there"))
    fake_llm.push(tool_call("read_file", {"path": "a.md"}, call_id="call_7"))
    answer = await provider.chat([{"role": "user", "content": "hi"}])
    called = await provider.chat([{"role": "user", "content": "read"}])
    assert answer.content == "hello there" and answer.finish_reason == "stop"
    assert answer.tool_calls == () and answer.prompt_tokens > 0 and answer.completion_tokens > 0
    assert called.tool_calls == (ToolCall("call_7", "read_file", '{"path": "a.md"}'),)
    assert called.finish_reason == "tool_calls"


async def test_arguments_sent_as_an_object_become_json_text(
    provider: OpenAIProvider, fake_llm: FakeLLM
) -> None:
    """A server that sends a call's arguments as an object, not text, still gets its call run."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    body = {"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]}
    fake_llm.push({"raw": json.dumps(body)})
    answer = await provider.chat([{"role": "user", "content": "hi"}])
    assert answer.tool_calls == (ToolCall("c1", "f", '{"x": 1}'),)
    assert answer.prompt_tokens == 0 and answer.content is None


@pytest.mark.parametrize(
    ("raw", "cause"),
    [
        ("<html>busy</html>", "unusable answer from the model"),
        ('{"id": "x", "choices": []}', "the model's answer has no choices"),
        ('{"choices": [{"message": {"content": ["part"]}}]}', "content is not text"),
        ('{"choices": [{"message": {"tool_calls": "f"}}]}', "tool_calls is not a list"),
    ],
    ids=["not-json", "no-choices", "content-not-text", "calls-not-list"],
)
async def test_an_unusable_answer_is_an_llm_error_naming_it(
    provider: OpenAIProvider, fake_llm: FakeLLM, raw: str, cause: str
) -> None:
    """An answer that is not a completion is an LLMError saying what is wrong, with model and
    endpoint filled in for the log line."""
    fake_llm.push({"raw": raw})
    with pytest.raises(LLMError) as caught:
        await provider.chat([{"role": "user", "content": "hi"}])
    assert cause in str(caught.value)
    assert caught.value.model == "m" and caught.value.endpoint == provider.endpoint


async def test_statuses_stay_typed_errors(provider: OpenAIProvider, fake_llm: FakeLLM) -> None:
    """A 429 is a rate-limit error with its retry-after, a 401 a status error with its code,
    and the key the server echoes is redacted."""
    fake_llm.push(error(429, "slow down", retry_after=30))
    fake_llm.push(error(401, "Incorrect API key provided: sk-test-key"))
    with pytest.raises(LLMRateLimitError) as limited:
        await provider.chat([{"role": "user", "content": "hi"}])
    with pytest.raises(LLMStatusError) as refused:
        await provider.chat([{"role": "user", "content": "hi"}])
    assert limited.value.retry_after == 30
    assert refused.value.status == 401 and "sk-test-key" not in str(refused.value)


async def test_the_sdk_still_retries_a_server_error(fake_llm: FakeLLM) -> None:
    """With `llm.max_retries` 1, a 500 is asked again by the SDK and the second answer is used."""
    fake_llm.push(error(500, "overloaded"))
    fake_llm.push(text("second time lucky"))
    chat = OpenAIProvider(base_url=fake_llm.url, api_key="k", model="m", max_retries=1)
    try:
        answer = await chat.chat([{"role": "user", "content": "hi"}])
    finally:
        await chat.close()
    assert answer.content == "second time lucky" and len(fake_llm.requests) == 2
