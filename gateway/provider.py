"""The models behind the agent: the `ChatProvider` seam, its OpenAI-SDK implementation, and the
embeddings client that memory search uses when `memory.embeddings` is configured.

This is the only module that imports `openai`; its exceptions are translated here, chained with
`from exc`: into `gateway.errors.LLMError` subclasses for chat, into memory's `EmbeddingError` for
embeddings (which the search catches, falling back to keywords).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import httpx
import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.bus import scrub
from gateway.errors import (
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMStatusError,
    LLMTimeoutError,
    LLMToolsUnsupportedError,
    TranscriptionError,
)
from gateway.logs import redact
from gateway.stream_parts import StreamParts
from memory.errors import EmbeddingError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model sent it


@dataclass(frozen=True, slots=True)
class ChatResponse:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


TextSink = Callable[[str], Awaitable[None]]


class ChatProvider(Protocol):
    """Anything that can answer a chat completion request."""

    model: str

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> ChatResponse: ...

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
    ) -> ChatResponse:
        """The same answer as `chat`, its text handed to `on_text` piece by piece as it comes."""
        ...


ToolsMode = Literal["auto", "on", "off"]

# How servers say a model cannot call tools: Ollama ("... does not support tools"), OpenRouter
# ("No endpoints found that support tool use"), vLLM started without --enable-auto-tool-choice.
_TOOLS_REFUSED = re.compile(
    r"(does not|doesn't) support tools|support tool use|tools? (is|are) not supported"
    r"|enable-auto-tool-choice",
    re.IGNORECASE,
)


class _Capability:
    """A capability of the endpoint that `auto` assumes until the endpoint refuses it once.

    The first refusal switches it off for the process with one warning (`_SWITCHED_OFF`).
    """

    _SWITCHED_OFF = ""
    mode: object
    enabled: bool

    def refused(self, model: str) -> bool:
        """The endpoint refused it; True if we switched it off (mode `auto`)."""
        if self.mode != "auto":
            return False
        if self.enabled:
            self.enabled = False
            log.warning(self._SWITCHED_OFF, model)
        return True


class ToolSupport(_Capability):
    """Whether requests carry tools: `llm.tools`, and in `auto` what the endpoint has told us.

    One instance is shared by every client of one process, so the switch to no tools happens once,
    with one warning, for the replies and the consolidation alike.
    """

    _SWITCHED_OFF = (
        "model does not support tool calling; continuing without tools for this "
        "process (set llm.tools: off to skip this check) model=%s"
    )

    def __init__(self, mode: ToolsMode = "auto") -> None:
        self.mode = mode
        self.enabled = mode != "off"


VisionMode = bool | Literal["auto"]

# Model names that take image parts, as OpenAI, Anthropic, Google, Mistral and Ollama spell them.
_VISION_MODELS = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-5|\bo[134]\b|claude|gemini|gemma-?3|llava|vision|[-.]vl\b"
    r"|-vl-|\dvl\b|pixtral|minicpm-v|moondream|llama-?4|mistral-(small|medium)",
    re.IGNORECASE,
)
# How servers say a model cannot see images: OpenAI ("image_url is only supported by certain
# models"), vLLM ("is not a multimodal model"), Ollama, llama.cpp (no mmproj), DeepSeek's parser.
_IMAGES_REFUSED = re.compile(
    r"image_url is only supported|(does not|doesn't) support (images?|image input|vision)"
    r"|not a multimodal model|image input is not supported|unknown variant `image_url`"
    r"|missing data required for image input|images? (is|are) not supported",
    re.IGNORECASE,
)


class VisionSupport(_Capability):
    """Whether the current message may carry images: `llm.vision`, and in `auto` what we learnt.

    Like `ToolSupport`, one instance per process: the first refusal switches images off for every
    later turn, with one warning.
    """

    _SWITCHED_OFF = (
        "model does not accept images; continuing without them for this process "
        "(set llm.vision: false to skip this check) model=%s"
    )

    def __init__(self, mode: VisionMode = "auto", model: str = "") -> None:
        self.mode = mode
        self.enabled = mode is True or (mode == "auto" and bool(_VISION_MODELS.search(model)))


class StreamSupport(_Capability):
    """Whether replies are asked for as a stream (`stream: true`); on until the endpoint refuses.

    A refusal switches streaming off for the process, with one warning: replies then come whole.
    """

    _SWITCHED_OFF = "endpoint refused streaming; replies come whole for this process model=%s"

    def __init__(self) -> None:
        self.mode = "auto"
        self.enabled = True


def has_images(messages: list[dict[str, Any]]) -> bool:
    """True if any message carries an image content part."""
    return any(
        isinstance(m.get("content"), list)
        and any(isinstance(p, dict) and p.get("type") == "image_url" for p in m["content"])
        for m in messages
    )


def without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with image parts dropped; their text (which names each file) stays."""
    plain = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            texts = [p.get("text", "") for p in content if isinstance(p, dict)]
            message = {**message, "content": "\n\n".join(t for t in texts if t)}
        plain.append(message)
    return plain


def endpoint_of(base_url: str) -> str:
    """host:port of a base URL, for messages (never the path or credentials in it)."""
    parts = urlsplit(base_url)
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname or base_url}:{port}"


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
        self._secrets = _secrets(api_key)  # providers echo (part of) a refused key
        self.temperature = temperature
        self.max_tokens = max_tokens
        # Local servers (Ollama, llama.cpp) accept any key, but the SDK insists on one.
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
        )
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
    ) -> ChatResponse:
        """One completion; with tools off (`llm.tools`, or learnt in `auto`) none are sent.

        When the endpoint answers that the model cannot call tools, a plain reply (no
        `tool_choice`) is asked again without them; a call that insists on a tool (consolidation)
        gets LLMToolsUnsupportedError, so it can ask for its answer as text instead. Image parts
        refused by the endpoint (`llm.vision: auto`) are dropped and the request sent again.
        """
        for attempt in range(5):  # at most one adaptation per refused parameter
            kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
            kwargs[self._limit_key] = self.max_tokens
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
                if _IMAGES_REFUSED.search(str(exc)) and has_images(messages):
                    if not self.vision_support.refused(self.model):
                        raise
                    messages = without_images(messages)
                    continue
                if sends_tools and _TOOLS_REFUSED.search(str(exc)):
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
                # grows with the history. Retries, errors and response parsing are the same.
                completion = await self._client.post(
                    "/chat/completions", body=kwargs, cast_to=ChatCompletion
                )
        except TimeoutError as exc:
            raise self._error(LLMTimeoutError, f"no answer within {self._deadline:.0f}s") from exc
        except openai.APITimeoutError as exc:
            raise self._error(LLMTimeoutError, str(exc)) from exc
        except openai.APIConnectionError as exc:
            raise self._error(LLMConnectionError, _connection_text(exc)) from exc
        except openai.RateLimitError as exc:
            raise LLMRateLimitError(
                redact(_status_text(exc), self._secrets),
                _retry_after(exc),
                model=self.model,
                endpoint=self.endpoint,
            ) from exc
        except openai.APIStatusError as exc:
            raise LLMStatusError(
                redact(_status_text(exc), self._secrets),
                exc.status_code,
                model=self.model,
                endpoint=self.endpoint,
            ) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise self._error(LLMError, f"unusable answer from the model: {exc}") from exc
        try:
            return _to_response(completion)
        except LLMError as exc:
            exc.model, exc.endpoint = self.model, self.endpoint
            raise

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
    ) -> ChatResponse:
        """One completion asked as a stream: each piece of answer text goes to `on_text` as it
        arrives, tool-call fragments are put together, usage is asked for where it is offered.

        Refused tools, images and parameters are learnt as `chat()` learns them. Any other 400
        before anything streamed is asked again whole; when that succeeds, the endpoint refuses
        streaming: it is switched off for the process with one warning, and from then on (as for
        this call) the whole text goes to `on_text` at once.
        """
        for _ in range(5):  # at most one adaptation per refused parameter
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
            except LLMStatusError as exc:
                if exc.status not in (400, 422):
                    raise
                refusal = str(exc)
                if _IMAGES_REFUSED.search(refusal) and has_images(messages):
                    if not self.vision_support.refused(self.model):
                        raise
                    messages = without_images(messages)
                    continue
                if sends_tools and _TOOLS_REFUSED.search(refusal):
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
                stream = await self._client.post(
                    "/chat/completions",
                    body=kwargs,
                    cast_to=ChatCompletion,
                    stream=True,
                    stream_cls=openai.AsyncStream[ChatCompletionChunk],
                )
        except TimeoutError as exc:
            raise self._error(LLMTimeoutError, f"no answer within {self._deadline:.0f}s") from exc
        except Exception as exc:
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
        except Exception as exc:
            ours = self._stream_error(exc)
            if ours is exc:
                raise
            raise ours from exc
        if not parts.chunks:
            raise self._error(LLMError, "unusable answer from the model: an empty stream")
        content = parts.content
        return ChatResponse(
            content=scrub(content) if content else content,
            tool_calls=tuple(
                ToolCall(id=call_id, name=scrub(name), arguments=scrub(arguments))
                for call_id, name, arguments in parts.calls()
            ),
            finish_reason=parts.finish_reason,
            prompt_tokens=parts.prompt_tokens,
            completion_tokens=parts.completion_tokens,
        )

    def _stream_error(self, exc: Exception) -> Exception:
        """The error of a streamed call as ours (the same kinds as a whole one); others as is."""
        if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
            return self._error(LLMTimeoutError, str(exc) or type(exc).__name__)
        if isinstance(exc, openai.APIConnectionError):
            return self._error(LLMConnectionError, _connection_text(exc))
        if isinstance(exc, httpx.TransportError):  # the connection broke in the middle
            return self._error(LLMConnectionError, f"the stream broke off: {exc!r}")
        if isinstance(exc, openai.RateLimitError):
            return LLMRateLimitError(
                redact(_status_text(exc), self._secrets),
                _retry_after(exc),
                model=self.model,
                endpoint=self.endpoint,
            )
        if isinstance(exc, openai.APIStatusError):
            return LLMStatusError(
                redact(_status_text(exc), self._secrets),
                exc.status_code,
                model=self.model,
                endpoint=self.endpoint,
            )
        if isinstance(exc, openai.OpenAIError | ValueError):
            return self._error(LLMError, f"unusable answer from the model: {exc}")
        return exc

    def _error(self, kind: type[LLMError], message: str) -> LLMError:
        return kind(redact(message, self._secrets), model=self.model, endpoint=self.endpoint)

    async def close(self) -> None:
        await self._client.close()


class OpenAIEmbedder:
    """memory's `Embedder` through the openai SDK against any OpenAI-compatible embeddings endpoint."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float = 30) -> None:
        self.model = model
        self._timeout = timeout
        # No retries: a failed call costs one query its vectors, not the search; the next one retries.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=0
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            async with asyncio.timeout(self._timeout):
                # "float" explicitly: the SDK's default (base64) is not served by every server.
                answer = await self._client.embeddings.create(
                    model=self.model, input=texts, encoding_format="float"
                )
        except TimeoutError as exc:
            raise EmbeddingError(f"no answer within {self._timeout:.0f}s") from exc
        except openai.APIStatusError as exc:
            raise EmbeddingError(_status_text(exc)) from exc
        except (openai.OpenAIError, ValueError) as exc:  # connection errors, unparseable answers
            raise EmbeddingError(f"{type(exc).__name__}: {exc}") from exc
        ordered = sorted(answer.data, key=lambda item: item.index)
        return [list(item.embedding) for item in ordered]

    async def close(self) -> None:
        await self._client.close()


class OpenAITranscriber:
    """Speech to text through the openai SDK against any OpenAI-compatible transcriptions endpoint."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float = 120) -> None:
        self.model = model
        self.endpoint = endpoint_of(base_url)
        self._secrets = _secrets(api_key)  # providers echo (part of) a refused key
        self._timeout = timeout
        # No retries: a voice note that failed is kept and named; the person can send it again.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=0
        )

    async def transcribe(self, filename: str, data: bytes) -> str:
        """The text spoken in one audio file (the SDK sends it as multipart, as OpenAI expects)."""
        try:
            async with asyncio.timeout(self._timeout + 5):
                answer = await self._client.audio.transcriptions.create(
                    model=self.model, file=(filename, data)
                )
        except TimeoutError as exc:
            raise TranscriptionError(f"no answer within {self._timeout:.0f}s") from exc
        except openai.APIConnectionError as exc:
            raise TranscriptionError(f"could not reach {self.endpoint}") from exc
        except openai.APIStatusError as exc:
            raise TranscriptionError(redact(_status_text(exc), self._secrets)) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise TranscriptionError(f"unusable answer: {type(exc).__name__}") from exc
        return scrub(answer.text or "").strip()

    async def close(self) -> None:
        await self._client.close()


def _to_response(completion: Any) -> ChatResponse:
    if not getattr(completion, "choices", None):
        raise LLMError("the model's answer has no choices")
    choice = completion.choices[0]
    message = choice.message
    calls = tuple(
        ToolCall(
            id=call.id or f"call_{index}",
            name=scrub(call.function.name or ""),
            arguments=scrub(call.function.arguments or "{}"),
        )
        for index, call in enumerate(message.tool_calls or ())
        if getattr(call, "function", None) is not None
    )
    usage = completion.usage
    return ChatResponse(
        content=scrub(message.content) if message.content else message.content,
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
        completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
    )


def _secrets(api_key: str) -> tuple[str, ...]:
    """The key to redact from error texts; a placeholder of a few characters (a local server's
    "x") is no secret, and replacing it would garble every word that holds it."""
    return (api_key,) if len(api_key) >= 6 else ()


def _connection_text(exc: openai.APIConnectionError) -> str:
    """The root cause (refused, DNS) rather than the SDK's generic "Connection error."."""
    cause: BaseException | None = exc.__cause__
    while cause is not None and cause.__cause__ is not None:
        cause = cause.__cause__
    return f"{exc}: {cause}" if cause is not None and str(cause) else str(exc)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _status_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        detail = body.get("message") or body.get("error", {})
        if isinstance(detail, dict):
            detail = detail.get("message")
        if detail:
            return f"HTTP {exc.status_code}: {detail}"
    return f"HTTP {exc.status_code}: {exc.message}"
