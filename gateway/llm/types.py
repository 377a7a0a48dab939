"""The chat model seam, free of any SDK: what a call returns (`ChatResponse`), what a provider
offers (`ChatProvider`), which features a model refused (tools, forced calls, images, streaming:
switched off once, with one warning), and a completion's JSON read into a `ChatResponse`.

gateway/llm/provider.py implements the seam with the openai SDK.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from gateway.bus import scrub
from gateway.errors import LLMError
from gateway.llm.arguments import valid_arguments

log = logging.getLogger("gateway.llm.provider")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text: as the model sent it, or made valid (gateway/llm/arguments.py)


@dataclass(frozen=True, slots=True)
class ChatResponse:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


TextSink = Callable[[str], Awaitable[None]]
# The text handed to a TextSink so far is void: the stream broke and its answer is asked again.
RestartSink = Callable[[], Awaitable[None]]


class ChatProvider(Protocol):
    """Anything that can answer a chat completion request."""

    model: str

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ChatResponse:
        """One whole completion; `max_tokens`: this call's own output limit (else the provider's)."""
        ...

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
        on_restart: RestartSink | None = None,
    ) -> ChatResponse:
        """The same answer as `chat`, its text handed to `on_text` piece by piece as it comes.

        A stream that breaks off is asked again; `on_restart` is then told that the text handed
        over so far is void, and the pieces that follow make up the whole answer anew.
        """
        ...


ToolsMode = Literal["auto", "on", "off"]

# How servers say a model cannot call tools: Ollama ("... does not support tools"), OpenRouter
# ("No endpoints found that support tool use"), vLLM started without --enable-auto-tool-choice.
TOOLS_REFUSED = re.compile(
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

    mode: ToolsMode

    def __init__(self, mode: ToolsMode = "auto") -> None:
        self.mode = mode
        self.enabled = mode != "off"


class ForcedCalls(_Capability):
    """Whether a forced tool call comes back as a call; in `auto` (of `llm.tools`) assumed until
    the endpoint answers one with text, as servers do that accept `tools` and ignore them.

    One instance per process, held by consolidation's model: the first forced call answered with
    text switches consolidation to asking for JSON text, with one warning. Replies keep their
    tools, which such a server answers in text anyway.
    """

    _SWITCHED_OFF = (
        "model answered a forced tool call with text; consolidation asks for JSON text "
        "for this process (set llm.tools: off to skip this check) model=%s"
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
IMAGES_REFUSED = re.compile(
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


def to_response(answer: object) -> ChatResponse:
    """The fields a turn uses, read from the decoded answer; LLMError if it is not a completion.

    The SDK hands back the body as text when the server mislabels it (not `application/json`),
    so text is decoded here too.
    """
    if isinstance(answer, str | bytes):
        try:
            answer = json.loads(answer)
        except ValueError as exc:
            raise LLMError("unusable answer from the model: not JSON") from exc
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise LLMError("the model's answer has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise LLMError("unusable answer from the model: its choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise LLMError("unusable answer from the model: its content is not text")
    usage = answer.get("usage") if isinstance(answer, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    finish_reason = _text(choice.get("finish_reason"))
    return ChatResponse(
        content=scrub(content) if content else content,
        tool_calls=_tool_calls(message.get("tool_calls"), cut=finish_reason == "length"),
        finish_reason=finish_reason,
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
    )


def _tool_calls(raw: object, *, cut: bool) -> tuple[ToolCall, ...]:
    """The answer's function calls, their arguments made valid JSON where that is sure (`cut`:
    the answer hit its output limit); entries without a function are not calls we can run."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise LLMError("unusable answer from the model: tool_calls is not a list")
    calls = []
    for index, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            # Some servers send the arguments as an object rather than JSON text.
            arguments = "{}" if arguments is None else json.dumps(arguments, ensure_ascii=False)
        calls.append(
            ToolCall(
                id=_text(call.get("id")) or f"call_{index}",
                name=scrub(_text(function.get("name")) or ""),
                arguments=scrub(valid_arguments(arguments or "{}", cut)),
            )
        )
    return tuple(calls)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
