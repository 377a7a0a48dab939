"""The chat provider's HTTP transport: kept-alive connections, no queue for a connection, the
environment's proxy, and each way a call fails named as what it is (and retried by the SDK)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

from gateway.errors import LLMConnectionError, LLMTimeoutError
from gateway.llm.provider import OpenAIProvider
from tests.fakes.llm import FakeLLM, drop, text

HI = [{"role": "user", "content": "hi"}]


async def test_calls_one_after_another_share_one_connection(
    provider: OpenAIProvider, fake_llm: FakeLLM
) -> None:
    """Turns after the first reuse the kept-alive connection instead of opening one each."""
    for _ in range(5):
        await provider.chat(HI)
    assert len({tuple(r["_peer"]) for r in fake_llm.requests}) == 1


async def test_many_calls_at_once_are_all_sent_at_once(
    provider: OpenAIProvider, fake_llm: FakeLLM
) -> None:
    """120 calls in flight together all reach the server: none waits for a pooled connection
    (more than the 100 that aiohttp's and httpx's own default pools hold)."""
    calls = 120
    release = asyncio.Event()
    for _ in range(calls):
        fake_llm.push(text("late"), hold=release)
    async with asyncio.TaskGroup() as group:
        answers = [group.create_task(provider.chat(HI)) for _ in range(calls)]
        try:
            await fake_llm.wait_for(lambda: fake_llm.in_flight == calls)
        finally:
            release.set()
    assert all(a.result().content == "late" for a in answers)


async def test_a_refused_connection_is_a_connection_error(free_url: str) -> None:
    """Nothing listening is "could not reach", never reported as the model being slow."""
    chat = OpenAIProvider(base_url=free_url, api_key="k", model="m", max_retries=0)
    try:
        with pytest.raises(LLMConnectionError) as caught:
            await chat.chat(HI)
    finally:
        await chat.close()
    assert "could not reach 127.0.0.1:" in caught.value.cause
    assert "Connect" in str(caught.value)  # the transport's own words, e.g. "Connect call failed"


async def test_a_dropped_connection_is_a_connection_error_the_sdk_retries(
    fake_llm: FakeLLM,
) -> None:
    """A server that hangs up without answering: a connection error, asked again with
    `llm.max_retries`, and the second answer is used."""
    fake_llm.push(drop())
    once = OpenAIProvider(base_url=fake_llm.url, api_key="k", model="m", max_retries=0)
    try:
        with pytest.raises(LLMConnectionError):
            await once.chat(HI)
    finally:
        await once.close()
    fake_llm.push(drop())
    fake_llm.push(text("second time lucky"))
    twice = OpenAIProvider(base_url=fake_llm.url, api_key="k", model="m", max_retries=1)
    try:
        answer = await twice.chat(HI)
    finally:
        await twice.close()
    assert answer.content == "second time lucky" and len(fake_llm.requests) == 3


async def test_a_dropped_stream_is_a_connection_error(fake_llm: FakeLLM) -> None:
    """A streamed call whose server hangs up before answering is a connection error too."""
    fake_llm.push(drop())
    chat = OpenAIProvider(base_url=fake_llm.url, api_key="k", model="m", max_retries=0)
    shown: list[str] = []

    async def show(piece: str) -> None:
        shown.append(piece)

    try:
        with pytest.raises(LLMConnectionError):
            await chat.stream_chat(HI, on_text=show)
    finally:
        await chat.close()
    assert shown == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_no_answer_within_the_timeout_is_a_timeout_error(
    fake_llm: FakeLLM, stream: bool
) -> None:
    """A server that takes the request and says nothing for `llm.timeout` is a timeout error."""
    release = asyncio.Event()
    fake_llm.push(text("too late"), hold=release)
    chat = OpenAIProvider(base_url=fake_llm.url, api_key="k", model="m", timeout=0.3, max_retries=0)

    async def show(piece: str) -> None:
        pass

    try:
        with pytest.raises(LLMTimeoutError) as caught:
            if stream:
                await chat.stream_chat(HI, on_text=show)
            else:
                await chat.chat(HI)
    finally:
        release.set()
        await chat.close()
    assert "did not answer in time" in caught.value.cause


async def test_the_environment_proxy_carries_the_calls(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY is honoured: a call to a host that does not resolve goes to the proxy (here
    the fake itself, which serves a proxied request as any other) naming that host."""
    origin = urlsplit(fake_llm.url)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://{origin.netloc}")
    chat = OpenAIProvider(base_url="http://llm.invalid/v1", api_key="k", model="m", max_retries=0)
    try:
        answer = await chat.chat(HI)
    finally:
        await chat.close()
    assert answer.content == "echo: hi"
    assert fake_llm.requests[0]["_headers"]["host"] == "llm.invalid"


@pytest.fixture
def free_url(refused_port: int) -> str:
    """A base URL on loopback where nothing listens."""
    return f"http://127.0.0.1:{refused_port}/v1"
