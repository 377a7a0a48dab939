"""The model behind the agent: the OpenAI-SDK implementation of the `ChatProvider` seam
(gateway/llm/types.py). The embeddings and speech clients are gateway/llm/clients.py's.

With clients.py, the only module that imports `openai`; its exceptions (and those of the
transports under it, httpx2 and, for chat, aiohttp) are translated here, chained with `from exc`,
into `gateway.errors.LLMError` subclasses.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from secrets import token_hex
from typing import Any

import aiohttp
import httpx2
import openai

from gateway.bus import scrub
from gateway.errors import (
    LLMBrokenStreamError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMStatusError,
    LLMTimeoutError,
    LLMToolsUnsupportedError,
)
from gateway.llm.arguments import valid_arguments
from gateway.llm.stream_parts import StreamParts
from gateway.llm.types import (
    IMAGES_REFUSED,
    TOOLS_REFUSED,
    ChatResponse,
    RestartSink,
    StreamSupport,
    TextSink,
    ToolCall,
    ToolSupport,
    VisionSupport,
    endpoint_of,
    has_images,
    to_response,
    without_images,
)
from gateway.logs import redact

log = logging.getLogger(__name__)


class _StreamCutError(Exception):
    """A stream that ended (`[DONE]` or the end of the body) without a finish_reason: broken
    off, not finished. llama-cpp-python's server ends a running stream so when another request
    arrives (its default `interrupt_requests`). `shown`: text of it went to the sink."""

    def __init__(self, shown: bool) -> None:
        super().__init__("the stream ended without a finish_reason")
        self.shown = shown


class OpenAIProvider:
    """Chat completions through the openai SDK against any OpenAI-compatible endpoint."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float = 60,
        max_retries: int = 2,
        temperature: float = 0.7,
        max_tokens: int = 4096,
        tool_support: ToolSupport | None = None,
        vision_support: VisionSupport | None = None,
    ) -> None:
        self.model = model
        self.endpoint = endpoint_of(base_url)
        self.tool_support = tool_support or ToolSupport()
        self.vision_support = vision_support or VisionSupport(model=model)
        self.stream_support = StreamSupport()
        self._secrets = secrets_of(api_key)  # providers echo (part of) a refused key
        self.temperature = temperature
        self.max_tokens = max_tokens
        # The SDK's aiohttp transport (aiohttp comes with the SDK) rather than its default
        # httpx2 one: the SDK's retries, timeouts, typed errors and environment proxies stay,
        # and a turn's request costs about a quarter fewer instructions. Its pool (1,000
        # connections) is far above `agent.max_concurrency`, so no call queues for a connection.
        # Local servers (Ollama, llama.cpp) accept any key, but the SDK insists on one.
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
            http_client=openai.DefaultAioHttpClient(),
        )
        # The absolute URL spares the SDK joining it to the base URL on every call. The SDK
        # makes an idempotency key for every request (a uuid4: an urandom call) though its
        # OpenAI client sends none; a counter after a random prefix costs less and is as unique,
        # should a version send it (a key is kept across the SDK's retries of its request).
        self._url = f"{base_url.rstrip('/')}/chat/completions"
        prefix = f"memgate-{token_hex(8)}"
        self._keys = (f"{prefix}-{n}" for n in itertools.count(1))
        # The SDK bounds each attempt; this bounds all attempts together.
        self._deadline = timeout * (max_retries + 1) + 10
        self._limit_key = "max_tokens"
        self._send_temperature = True
        self._idle = float(timeout)  # longest silence inside a stream
        self._stream_usage = True  # stream_options.include_usage, until the endpoint refuses it

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ChatResponse:
        """One completion; with tools off (`llm.tools`, or learnt in `auto`) none are sent.
        `max_tokens`: this call's output limit, in place of the provider's (`llm.max_tokens`).

        When the endpoint answers that the model cannot call tools, a plain reply (no
        `tool_choice`) is asked again without them; a call that insists on a tool (consolidation)
        gets LLMToolsUnsupportedError, so it can ask for its answer as text instead. Image parts
        refused by the endpoint (`llm.vision: auto`) are dropped and the request sent again.
        """
        for attempt in range(5):  # at most one adaptation per refused parameter
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
            kwargs[self._limit_key] = max_tokens or self.max_tokens
            if self._send_temperature:
                kwargs["temperature"] = self.temperature
            sends_tools = bool(tools) and self.tool_support.enabled
            if sends_tools:
                kwargs["tools"] = tools
                if tool_choice is not None:
                    kwargs["tool_choice"] = tool_choice
            try:
                return await self._post(kwargs)
            except LLMStatusError as exc:
                if IMAGES_REFUSED.search(str(exc)) and has_images(messages):
                    if not self.vision_support.refused(self.model):
                        raise
                    messages = without_images(messages)
                    continue
                if sends_tools and TOOLS_REFUSED.search(str(exc)):
                    switched = self.tool_support.refused(self.model)
                    if not switched or tool_choice is not None:
                        raise LLMToolsUnsupportedError(
                            str(exc), exc.status or 400, model=self.model, endpoint=self.endpoint
                        ) from exc
                    continue
                if attempt == 4 or not self._adapt(exc):
                    raise
        raise AssertionError("unreachable")

    def _adapt(self, exc: LLMStatusError) -> bool:
        """Learn from a 400 that names a parameter this model refuses; True to try again.

        OpenAI's reasoning models (o1, o3, gpt-5…) refuse `max_tokens` in favour of
        `max_completion_tokens`, and any temperature but the default; most other compatible
        servers want `max_tokens`. Rather than guess from model names, switch once when told.
        """
        text = str(exc)
        if exc.status != 400:
            return False
        if "max_tokens" in text and "max_completion_tokens" in text:
            self._limit_key = (
                "max_completion_tokens" if self._limit_key == "max_tokens" else "max_tokens"
            )
        elif "temperature" in text and self._send_temperature:
            self._send_temperature = False
        else:
            return False
        log.warning("model refused a parameter; adapting model=%s error=%s", self.model, text)
        return True

    async def _post(self, kwargs: dict[str, Any]) -> ChatResponse:
        try:
            async with asyncio.timeout(self._deadline):
                # The SDK's generic `post` (its documented way to call any endpoint) sends our
                # already wire-shaped body as is; `chat.completions.create` would first walk every
                # message through its TypedDict transformer, which costs milliseconds per turn and
                # grows with the history. `cast_to=object` hands back the decoded JSON instead of
                # a tree of pydantic models, of which a turn reads five fields; retries and the
                # typed errors for HTTP statuses are the SDK's, as before.
                answer = await self._client.post(
                    self._url,
                    body=kwargs,
                    cast_to=object,
                    options={"idempotency_key": next(self._keys)},
                )
        except TimeoutError as exc:
            raise self._error(LLMTimeoutError, f"no answer within {self._deadline:.0f}s") from exc
        except openai.APIConnectionError as exc:  # a timeout too, or posing as one
            if _timed_out(exc):
                raise self._error(LLMTimeoutError, str(exc)) from exc
            raise self._error(LLMConnectionError, _connection_text(exc)) from exc
        except openai.RateLimitError as exc:
            raise LLMRateLimitError(
                redact(status_text(exc), self._secrets),
                _retry_after(exc),
                model=self.model,
                endpoint=self.endpoint,
            ) from exc
        except openai.APIStatusError as exc:
            raise LLMStatusError(
                redact(status_text(exc), self._secrets),
                exc.status_code,
                model=self.model,
                endpoint=self.endpoint,
            ) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise self._error(LLMError, f"unusable answer from the model: {exc}") from exc
        try:
            return to_response(answer)
        except LLMError as exc:
            exc.model, exc.endpoint = self.model, self.endpoint
            raise

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
        on_restart: RestartSink | None = None,
    ) -> ChatResponse:
        """One completion asked as a stream: each piece of answer text goes to `on_text` as it
        arrives, tool-call fragments are put together, usage is asked for where it is offered.

        Refused tools, images and parameters are learnt as `chat()` learns them. Any other 400
        before anything streamed is asked again whole; when that succeeds, the endpoint refuses
        streaming: it is switched off for the process with one warning, and from then on (as for
        this call) the whole text goes to `on_text` at once.

        A stream that ends without a finish_reason was broken off, and its text is no answer:
        the request is sent again, streamed, then whole if that breaks too (a server does not
        interrupt a whole answer). `on_restart` is told before the text begins anew.
        """
        cuts = 0
        for _ in range(6):  # at most one adaptation per refused parameter, and one cut
            if not self.stream_support.enabled:
                break
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
            kwargs[self._limit_key] = self.max_tokens
            if self._send_temperature:
                kwargs["temperature"] = self.temperature
            if self._stream_usage:
                kwargs["stream_options"] = {"include_usage": True}
            sends_tools = bool(tools) and self.tool_support.enabled
            if sends_tools:
                kwargs["tools"] = tools
            try:
                return await self._stream(kwargs, on_text)
            except _StreamCutError as cut:
                cuts += 1
                again = "streamed" if cuts == 1 else "whole"
                log.warning("stream broke off; asking again %s model=%s", again, self.model)
                if cut.shown and on_restart is not None:
                    await on_restart()
                if cuts == 1:
                    continue
                break
            except LLMStatusError as exc:
                if exc.status not in (400, 422):
                    raise
                refusal = str(exc)
                if IMAGES_REFUSED.search(refusal) and has_images(messages):
                    if not self.vision_support.refused(self.model):
                        raise
                    messages = without_images(messages)
                    continue
                if sends_tools and TOOLS_REFUSED.search(refusal):
                    if not self.tool_support.refused(self.model):
                        raise LLMToolsUnsupportedError(
                            refusal, exc.status or 400, model=self.model, endpoint=self.endpoint
                        ) from exc
                    continue
                if "stream_options" in refusal and self._stream_usage:
                    self._stream_usage = False  # usage then counts as 0 for streamed replies
                    continue
                if self._adapt(exc):
                    continue
            response = await self.chat(messages, tools)
            self.stream_support.refused(self.model)  # the same request was taken whole
            if response.content and not response.tool_calls:
                await on_text(response.content)
            return response
        return await self._whole(messages, tools, on_text)

    async def _whole(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, on_text: TextSink
    ) -> ChatResponse:
        response = await self.chat(messages, tools)
        if response.content and not response.tool_calls:
            await on_text(response.content)
        return response

    async def _stream(self, kwargs: dict[str, Any], on_text: TextSink) -> ChatResponse:
        parts = StreamParts()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._deadline):
                # Each event's decoded JSON as is (`object`), not a ChatCompletionChunk model.
                stream = await self._client.post(
                    self._url,
                    body=kwargs,
                    options={"idempotency_key": next(self._keys)},
                    cast_to=object,
                    stream=True,
                    stream_cls=openai.AsyncStream[object],
                )
        except TimeoutError as exc:
            raise self._error(LLMTimeoutError, f"no answer within {self._deadline:.0f}s") from exc
        except Exception as exc:  # the SDK's errors translated; anything else passes unchanged
            ours = self._stream_error(exc)
            if ours is exc:
                raise
            raise ours from exc
        try:
            async with stream, asyncio.timeout(self._idle) as quiet:
                async for chunk in stream:
                    quiet.reschedule(loop.time() + self._idle)
                    piece = parts.add(chunk)
                    if piece:
                        await on_text(scrub(piece))
        except TimeoutError as exc:
            silent = f"the stream stopped for {self._idle:.0f}s"
            raise self._error(LLMTimeoutError, silent) from exc
        except Exception as exc:  # the SDK's errors translated; anything else passes unchanged
            ours = self._stream_error(exc)
            if ours is exc:
                raise
            raise ours from exc
        if parts.finish_reason is None:  # an empty stream too
            raise _StreamCutError(shown=bool(parts.text))
        content = parts.content
        cut = parts.finish_reason == "length"
        return ChatResponse(
            content=scrub(content) if content else content,
            tool_calls=tuple(
                ToolCall(
                    id=call_id, name=scrub(name), arguments=scrub(valid_arguments(arguments, cut))
                )
                for call_id, name, arguments in parts.calls()
            ),
            finish_reason=parts.finish_reason,
            prompt_tokens=parts.prompt_tokens,
            completion_tokens=parts.completion_tokens,
        )

    def _stream_error(self, exc: Exception) -> Exception:
        """The error of a streamed call as ours (the same kinds as a whole one); others as is."""
        if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException) and _timed_out(exc):
            return self._error(LLMTimeoutError, str(exc) or type(exc).__name__)
        if isinstance(exc, openai.APIConnectionError):
            return self._error(LLMConnectionError, _connection_text(exc))
        if isinstance(exc, httpx2.TransportError):  # the connection broke in the middle
            return self._error(LLMConnectionError, f"the stream broke off: {_root(exc)!r}")
        if isinstance(exc, openai.RateLimitError):
            return LLMRateLimitError(
                redact(status_text(exc), self._secrets),
                _retry_after(exc),
                model=self.model,
                endpoint=self.endpoint,
            )
        if isinstance(exc, openai.APIStatusError):
            return LLMStatusError(
                redact(status_text(exc), self._secrets),
                exc.status_code,
                model=self.model,
                endpoint=self.endpoint,
            )
        if type(exc) is openai.APIError:  # the SDK's reading of an error event in the stream
            return self._error(LLMBrokenStreamError, f"the server broke off: {exc.message}")
        if isinstance(exc, openai.OpenAIError | ValueError):
            return self._error(LLMError, f"unusable answer from the model: {exc}")
        return exc

    def _error(self, kind: type[LLMError], message: str) -> LLMError:
        return kind(redact(message, self._secrets), model=self.model, endpoint=self.endpoint)

    async def close(self) -> None:
        await self._client.close()


def secrets_of(api_key: str) -> tuple[str, ...]:
    """The key to redact from error texts; a placeholder of a few characters (a local server's
    "x") is no secret, and replacing it would garble every word that holds it."""
    return (api_key,) if len(api_key) >= 6 else ()


def _root(exc: BaseException) -> BaseException:
    """The first error of the chain `exc` was raised from (itself if it has no cause)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _timed_out(exc: BaseException) -> bool:
    """Whether a connection error of the SDK or its transport is a timeout.

    The aiohttp transport reports every failure to connect (refused, unknown host, a server that
    closed the connection) as a connect timeout, which the SDK then reports as a timeout; the
    aiohttp error it was raised from tells them apart (aiohttp's own timeouts are TimeoutErrors).
    """
    if not isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return False
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, aiohttp.ClientError):
        cause = cause.__cause__
    return cause is None or isinstance(cause, TimeoutError)


def _connection_text(exc: BaseException) -> str:
    """The root cause (refused, DNS) after the SDK's generic "Connection error."."""
    root = _root(exc)
    return f"Connection error.: {root}" if root is not exc and str(root) else "Connection error."


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def status_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        detail = body.get("message") or body.get("error", {})
        if isinstance(detail, dict):
            detail = detail.get("message")
        if detail:
            return f"HTTP {exc.status_code}: {detail}"
    return f"HTTP {exc.status_code}: {exc.message}"
