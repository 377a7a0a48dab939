"""A fake OpenAI-compatible chat completions server on 127.0.0.1 (aiohttp.web).

It records every request (with the client's address, so kept-alive connections show) and answers
from a script: text, tool calls, HTTP errors, dropped connections, delays, calls held open until the
test releases them, and streaming. With no script it echoes the last user message, so
`python -m tests.fakes.llm --port 8000` gives a new user something to point `memgate chat` at.
`/v1/embeddings` answers with vectors computed from the input text itself (see `embed_text`).
`/v1/audio/transcriptions` reads the multipart upload the SDK sends and answers from a script of
transcripts (or an error); `image_parts` lists the images a chat request carried.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import itertools
import json
import re
import time
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.serving import serve_until_interrupted

Reply = dict[str, Any]
STREAM_TOKEN = 4  # characters per streamed chunk: about one token of English
Responder = Callable[[dict[str, Any]], Awaitable[Reply | web.StreamResponse] | Reply]


def text(content: str) -> Reply:
    """A plain assistant answer."""
    return {"content": content}


def streamed(content: str, rate: float) -> Reply:
    """A plain answer streamed at `rate` tokens a second, whatever `FakeLLM.stream_rate` says
    (a slow answer among quick ones, as a soak run's groups need)."""
    return {"content": content, "rate": rate}


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> Reply:
    """An assistant turn that calls one tool."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"tool_calls": [{"id": call_id, "name": name, "arguments": args}]}


def parallel(*calls: Reply) -> Reply:
    """An assistant turn that calls several tools at once (OpenAI's parallel tool calls)."""
    return {"tool_calls": [call for reply in calls for call in reply["tool_calls"]]}


def error(status: int, message: str = "boom", **extra: Any) -> Reply:
    """An HTTP error in OpenAI's error shape."""
    return {"error": {"status": status, "message": message, **extra}}


def drop() -> Reply:
    """No answer at all: the server closes the connection once it has read the request."""
    return {"drop": True}


def cut(content: str, after: int) -> Reply:
    """Streamed: the first `after` characters, then `data: [DONE]` with no finish_reason, as
    llama-cpp-python's server ends a stream it interrupts for another request. Whole: `content`."""
    return {"content": content, "cut_after": after}


def stream_error(message: str, after: str = "") -> Reply:
    """Streamed: `after` as text, then `data: {"error": …}` (llama.cpp's way to fail once it has
    answered HTTP 200), and the end of the stream. Whole: HTTP 500 with `message`."""
    return {"content": after, "stream_error": message}


def raw_newlines(arguments: dict[str, Any]) -> str:
    """Tool-call arguments as JSON text with raw newlines inside its strings (a grammar-driven
    server such as llama.cpp's lets them through), not the `\\n` escapes JSON requires."""
    return json.dumps(arguments, ensure_ascii=False).replace("\\n", "\n")


def is_consolidation(body: dict[str, Any]) -> bool:
    """True for the memory consolidation call (it offers the save_memory tool)."""
    return any(t.get("function", {}).get("name") == "save_memory" for t in body.get("tools") or [])


def is_background(body: dict[str, Any]) -> bool:
    """True for a background agent's call (spawn's): its system prompt says it works so."""
    messages = body.get("messages") or [{}]
    return "## Working in the background" in str(messages[0].get("content"))


def is_compaction(body: dict[str, Any]) -> bool:
    """True for a MEMORY.md compaction call (it offers the compact_memory tool)."""
    tools = body.get("tools") or []
    return any(t.get("function", {}).get("name") == "compact_memory" for t in tools)


def compaction_reply(body: dict[str, Any]) -> Reply:
    """A compact_memory call that drops repeated lines of its part and keeps every other line."""
    part = last_user_text(body).partition("## Part of MEMORY.md to compact\n\n")[2]
    kept: list[str] = []
    for line in part.splitlines():
        if not line.strip() or line not in kept:
            kept.append(line)
    return tool_call("compact_memory", {"text": "\n".join(kept) + "\n"})


def forced_tool(body: dict[str, Any]) -> str:
    """The name of the tool a request's `tool_choice` forces ("" when it forces none)."""
    choice = body.get("tool_choice")
    return str(choice.get("function", {}).get("name", "")) if isinstance(choice, dict) else ""


def last_user_text(body: dict[str, Any]) -> str:
    """The last user message's text, without memgate's runtime block."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content or "").rpartition("[end of runtime context]\n\n")[2]
    return ""


def tool_results(body: dict[str, Any]) -> list[str]:
    """The contents of the tool results a request carries back to the model, in order."""
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


_STAMPED = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ")


def conversation_lines(body: dict[str, Any]) -> list[str]:
    """The chunk lines (each "[date time] ...") of a consolidation request."""
    chunk = last_user_text(body).partition("## Conversation to consolidate\n\n")[2]
    return [line for line in chunk.splitlines() if _STAMPED.match(line)]


def image_parts(body: dict[str, Any]) -> list[str]:
    """The image URLs (data URLs) of a chat request, in order."""
    urls = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            urls += [
                p["image_url"]["url"]
                for p in content
                if isinstance(p, dict) and p.get("type") == "image_url"
            ]
    return urls


def is_text_consolidation(body: dict[str, Any]) -> bool:
    """True for a consolidation asked as plain text (a model without tool calling)."""
    return not body.get("tools") and "Reply with one JSON object" in last_user_text(body)


def consolidation_prompt(body: dict[str, Any]) -> str:
    """The user message that carries MEMORY.md and the conversation to consolidate."""
    for message in body.get("messages", []):
        if message.get("role") == "user" and "## Conversation to consolidate" in str(
            message.get("content")
        ):
            return str(message["content"])
    return ""


def text_consolidation_reply(body: dict[str, Any]) -> Reply:
    """What a small model answers when asked for the save_memory arguments as text: fenced JSON."""
    wants_memory = '"memory_update"' in last_user_text(body)
    arguments = _consolidation_arguments(consolidation_prompt(body), wants_memory)
    return text(f"Here you go:\n```json\n{json.dumps(arguments)}\n```")


def consolidation_reply(body: dict[str, Any]) -> Reply:
    """A well-formed save_memory call: one history paragraph, MEMORY.md plus one fact."""
    wants_memory = any(
        t["function"]["parameters"]["properties"].get("memory_update") for t in body["tools"]
    )
    return tool_call("save_memory", _consolidation_arguments(last_user_text(body), wants_memory))


def _consolidation_arguments(prompt: str, wants_memory: bool) -> dict[str, str]:
    memory, _, conversation = prompt.partition("## Conversation to consolidate\n\n")
    memory = memory.removeprefix("## Current MEMORY.md\n\n").strip()
    lines = [line for line in conversation.splitlines() if line.startswith("[")]
    stamp = lines[-1][:18] if lines else "[2026-01-01 00:00]"
    first = lines[0][19:80] if lines else ""
    arguments = {"history_entry": f"{stamp} Summary of {len(lines)} messages: {first}"}
    if wants_memory:
        arguments["memory_update"] = f"{memory}\n- Fact from {len(lines)} messages\n"
    return arguments


def dense_tokens(text: str, density: float) -> int:
    """`density` times a cheap estimate of a text's cl100k tokens (4 bytes a token)."""
    return int(density * -(-len(text.encode()) // 4))


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = [c.get("function", {}) for c in message.get("tool_calls") or []]
    return "\n".join([str(content or ""), *(f"{f.get('name')}{f.get('arguments')}" for f in calls)])


EMBEDDING_DIMS = 64
# Words that mean the same thing share a dimension of their own, as a real embedding model places
# them close together: this is what lets a test find "car" by asking for "automobile". Every other
# word is hashed into the remaining dimensions.
SYNONYMS = {
    "car": "car",
    "cars": "car",
    "automobile": "car",
    "vehicle": "car",
    "doctor": "doctor",
    "physician": "doctor",
    "dog": "dog",
    "canine": "dog",
}
_CONCEPTS = {concept: dim for dim, concept in enumerate(sorted(set(SYNONYMS.values())))}


def embed_text(text: str) -> list[float]:
    """A bag of lower-cased words counted in EMBEDDING_DIMS dimensions, synonyms folded together."""
    vector = [0.0] * EMBEDDING_DIMS
    for word in re.findall(r"\w+", text.lower()):
        if word in SYNONYMS:
            dim = _CONCEPTS[SYNONYMS[word]]
        else:
            digest = hashlib.sha1(word.encode(), usedforsecurity=False).digest()
            dim = len(_CONCEPTS) + int.from_bytes(digest[:4], "big") % (
                EMBEDDING_DIMS - len(_CONCEPTS)
            )
        vector[dim] += 1.0
    return vector


@dataclass
class Step:
    """One scripted answer; `hold` keeps the request open until the event is set.

    `reply` may be a function of the request body, called once the hold is released.
    """

    reply: Reply | Callable[[dict[str, Any]], Reply]
    delay: float = 0.0
    hold: asyncio.Event | None = None
    match: Callable[[dict[str, Any]], bool] | None = None


@dataclass
class FakeLLM:
    """The server's state: what was asked, and what to answer next."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    default: Callable[[dict[str, Any]], Reply] | None = None
    delay: float = 0.0
    url: str = ""
    in_flight: int = 0
    embedding_requests: list[dict[str, Any]] = field(default_factory=list)
    embedding_error: Reply | None = None  # e.g. error(500): every embeddings request fails
    # Set: every embeddings request waits for it (a tool that embeds blocks, e.g. until a kill).
    embedding_hold: asyncio.Event | None = None
    # As Ollama serves a model without tool calling: any request offering tools gets a 400.
    tools_unsupported: bool = False
    # As mockllm serves: tools (even a forced `tool_choice`) are accepted and ignored; an
    # unscripted request offering them gets the plain text answer it would get without them.
    ignores_tools: bool = False
    # As OpenAI answers for a model without vision: any request with an image part gets a 400.
    vision_unsupported: bool = False
    # As a server without streaming answers: any request with `stream: true` gets a 400.
    streaming_unsupported: bool = False
    # As a local server whose tokenizer needs `token_density` times a cheap estimate of cl100k's
    # tokens (see `dense_tokens`; 0: usage as before): usage.prompt_tokens counts so, and a prompt
    # over `context_size` (0: no limit) gets llama-cpp-python's context-length 400 naming it.
    token_density: float = 0.0
    context_size: int = 0
    context_refusals: int = 0
    # `POST /tokenize` at the server's root, as llama.cpp and vLLM serve it; off: 404.
    tokenize_endpoint: bool = False
    tokenize_requests: list[dict[str, Any]] = field(default_factory=list)
    # Answers are written at this many tokens (STREAM_TOKEN characters each) a second, streamed
    # or whole (a whole one comes when its last token is written); 0: at once.
    stream_rate: float = 0.0
    streams: list[tuple[float, float]] = field(default_factory=list)  # (start, end), monotonic
    transcriptions: list[dict[str, Any]] = field(default_factory=list)  # one per upload
    transcripts: list[Reply] = field(default_factory=list)  # text(...) or error(...), in order
    # As llama-cpp-python's server (or llama.cpp with one slot) runs: one request at a time, a
    # second waits until the first is done. `served`: the requests in the order they were run.
    single_slot: bool = False
    served: list[dict[str, Any]] = field(default_factory=list)
    # `GET /props` at the root with this `total_slots`, as llama.cpp's server says it; None: 404.
    props_slots: int | None = None
    # `GET /v1/models`: these ids (None: "fake" and every model asked for so far, so a doctor
    # against the fake finds its model), each `owned_by` so (llama-cpp-python's says "me");
    # `models_endpoint` off: 404, as a server without the list.
    listed_models: list[str] | None = None
    models_owned_by: str = "fake"
    models_endpoint: bool = True
    # `GET /openapi.json` with this title (llama-cpp-python's: "🦙 llama.cpp Python API"); None: 404.
    openapi_title: str | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _arrived: asyncio.Condition | None = None
    _slot: asyncio.Lock = field(default_factory=asyncio.Lock)

    # -- scripting ---------------------------------------------------------------------------------
    def push(
        self,
        reply: Reply | Callable[[dict[str, Any]], Reply],
        *,
        delay: float = 0.0,
        hold: asyncio.Event | None = None,
        match: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        """Queue an answer for the next request that `match` accepts (any request if None)."""
        self.steps.append(Step(reply, delay, hold, match))

    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if not is_consolidation(r) and not is_compaction(r)]

    def consolidation_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if is_consolidation(r)]

    async def wait_for_requests(self, count: int, kind: str = "any", within: float = 10.0) -> None:
        """Wait until at least `count` requests (of `kind`: any, chat, consolidation) arrived."""
        assert self._arrived is not None
        pick = {
            "any": lambda: self.requests,
            "chat": self.chat_requests,
            "consolidation": self.consolidation_requests,
        }[kind]
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(lambda: len(pick()) >= count)

    async def wait_for(self, check: Callable[[], bool], within: float = 10.0) -> None:
        """Wait until `check()` holds, re-checked whenever a request arrives or a stream ends."""
        assert self._arrived is not None
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(check)

    # -- serving -----------------------------------------------------------------------------------
    def _next_step(self, body: dict[str, Any]) -> Step | None:
        for index, step in enumerate(self.steps):
            if step.match is None or step.match(body):
                return self.steps.pop(index)
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.json_response({"error": {"message": "bad json"}}, status=400)
        body["_headers"] = {k.lower(): v for k, v in request.headers.items()}
        body["_arrived_at"] = time.monotonic()
        # The client's end of the connection: two requests on one kept-alive connection share it.
        body["_peer"] = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append(body)
        if self._arrived is not None:
            async with self._arrived:
                self._arrived.notify_all()
        if self.vision_unsupported and image_parts(body):
            return await self._respond(
                request,
                body,
                error(400, "Invalid content type. image_url is only supported by certain models."),
            )
        if self.streaming_unsupported and body.get("stream"):
            return await self._respond(
                request, body, error(400, "stream: streaming is not supported by this server")
            )
        if self.tools_unsupported and body.get("tools"):
            model = body.get("model", "fake")
            return await self._respond(
                request,
                body,
                error(400, f"registry.ollama.ai/library/{model} does not support tools"),
            )
        if self.context_size and self.prompt_tokens(body) > self.context_size:
            self.context_refusals += 1
            return await self._respond(request, body, self._context_refusal(body))
        if self.single_slot:
            async with self._slot:
                self.served.append(body)
                return await self._answer(request, body)
        self.served.append(body)
        return await self._answer(request, body)

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        step = self._next_step(body)
        self.in_flight += 1
        try:
            reply: Reply | Callable[[dict[str, Any]], Reply]  # a function: called after the hold
            if step is None:
                if self.default is not None:
                    reply = self.default(body)
                elif is_consolidation(body) and not self.ignores_tools:
                    reply = consolidation_reply(body)
                elif is_text_consolidation(body):
                    reply = text_consolidation_reply(body)
                elif is_compaction(body) and not self.ignores_tools:
                    reply = compaction_reply(body)
                elif forced_tool(body) and not self.ignores_tools:
                    reply = tool_call(forced_tool(body), {})  # as a server honouring tool_choice
                else:
                    reply = text(f"echo: {last_user_text(body)}")
                delay, hold = self.delay, None
            else:
                reply, delay, hold = step.reply, step.delay, step.hold
            if delay:
                await asyncio.sleep(delay)
            if hold is not None:
                await hold.wait()
            if callable(reply):
                reply = reply(body)
            return await self._respond(request, body, reply)
        finally:
            self.in_flight -= 1

    async def _respond(
        self, request: web.Request, body: dict[str, Any], reply: Reply
    ) -> web.StreamResponse:
        if reply.get("drop"):
            if request.transport is not None:
                request.transport.close()
            return web.Response()  # never written: the connection is gone
        if "error" in reply:
            err = dict(reply["error"])
            status = err.pop("status", 500)
            headers = {}
            if "retry_after" in err:
                headers["retry-after"] = str(err.pop("retry_after"))
            payload = {"error": {"type": "fake_error", "code": None, "param": None, **err}}
            return web.json_response(payload, status=status, headers=headers)
        if "raw" in reply and body.get("stream"):  # the same broken text, as a server-sent event
            return web.Response(text=f"data: {reply['raw']}\n\n", content_type="text/event-stream")
        if "raw" in reply:
            return web.Response(text=reply["raw"], content_type="application/json")
        if "stream_error" in reply and not body.get("stream"):
            return await self._respond(request, body, error(500, reply["stream_error"]))
        message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
        finish = "stop"
        if reply.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": call.get("id") or f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in reply["tool_calls"]
            ]
            finish = "tool_calls"
        prompt_chars = len(json.dumps(body.get("messages", [])))
        usage = {
            "prompt_tokens": self.prompt_tokens(body) or max(1, prompt_chars // 4),
            "completion_tokens": max(1, len(message.get("content") or "") // 4),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if body.get("stream"):
            rate = float(reply.get("rate", self.stream_rate))
            broken = {k: reply[k] for k in ("cut_after", "stream_error") if k in reply}
            return await self._stream(request, body, message, finish, usage, rate, **broken)
        if self.stream_rate:  # as long as the model takes to write it all
            tokens = -(-len(message.get("content") or "") // STREAM_TOKEN)
            await asyncio.sleep(tokens / self.stream_rate)
        return web.json_response(
            {
                "id": f"chatcmpl-{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        message: dict[str, Any],
        finish: str,
        usage: dict[str, int],
        rate: float,
        cut_after: int | None = None,
        stream_error: str | None = None,
    ) -> web.StreamResponse:
        """Server-sent events as OpenAI sends them: `data: {chunk}` lines, then `data: [DONE]`.
        `cut_after`: `[DONE]` after that many characters, no finish_reason; `stream_error`: an
        error event after the text (see `cut` and `stream_error`).

        The text goes out STREAM_TOKEN characters a chunk, at `rate` chunks a second on a
        fixed schedule (unpaced, in larger chunks when it is long); a tool call's arguments come in two fragments; usage in a last chunk
        without choices when `stream_options.include_usage` asks for it.
        """
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        started = time.monotonic()
        base = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }

        async def send(delta: dict[str, Any], reason: str | None = None) -> None:
            chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        try:
            await send({"role": "assistant", "content": ""})
            content = (message.get("content") or "")[:cut_after]
            # Unpaced, a long answer comes in about a thousand chunks, as fast as a test wants.
            size = STREAM_TOKEN if rate else max(STREAM_TOKEN, len(content) // 1000)
            for number, start in enumerate(range(0, len(content), size)):
                if rate:
                    due = started + (number + 1) / rate
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                await send({"content": content[start : start + size]})
            if cut_after is not None or stream_error is not None:
                if stream_error is not None:
                    failure = {"code": 500, "message": stream_error, "type": "server_error"}
                    await response.write(f"data: {json.dumps({'error': failure})}\n\n".encode())
                else:
                    await response.write(b"data: [DONE]\n\n")
                await response.write_eof()
                return response
            for index, call in enumerate(message.get("tool_calls") or []):
                arguments = call["function"]["arguments"]
                half = len(arguments) // 2
                head = {**call, "function": {"name": call["function"]["name"], "arguments": ""}}
                await send({"tool_calls": [{"index": index, **head}]})
                for fragment in (arguments[:half], arguments[half:]):
                    await send(
                        {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
                    )
            await send({}, finish)
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk = {**base, "choices": [], "usage": usage}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:
            return response  # the client went away mid-stream (a /stop, a shutdown)
        self.streams.append((started, time.monotonic()))
        if self._arrived is not None:
            async with self._arrived:
                self._arrived.notify_all()
        return response

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's embeddings endpoint: float lists, or base64 float32 as the SDK asks by default."""
        body = await request.json()
        body["_headers"] = {k.lower(): v for k, v in request.headers.items()}
        self.embedding_requests.append(body)
        if self._arrived is not None:
            async with self._arrived:
                self._arrived.notify_all()
        if self.embedding_hold is not None:
            await self.embedding_hold.wait()
        if self.embedding_error is not None:
            return await self._respond(request, body, self.embedding_error)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for index, item in enumerate(texts):
            vector: Any = embed_text(item)
            if body.get("encoding_format") == "base64":
                vector = base64.b64encode(array("f", vector).tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(len(item.split()) for item in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "fake"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def transcribe(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's transcriptions endpoint: multipart `file` and `model`; JSON `{"text": ...}`."""
        upload: dict[str, Any] = {}
        async for part in await request.multipart():
            if isinstance(part, aiohttp.BodyPartReader) and part.name:
                data = await part.read()
                if part.filename:
                    upload["filename"], upload["file"] = part.filename, bytes(data)
                else:
                    upload[part.name] = data.decode()
        upload["_headers"] = {k.lower(): v for k, v in request.headers.items()}
        self.transcriptions.append(upload)
        if self._arrived is not None:
            async with self._arrived:
                self._arrived.notify_all()
        reply = self.transcripts.pop(0) if self.transcripts else text("hello from a voice note")
        if "error" in reply:
            return await self._respond(request, upload, reply)
        return web.json_response({"text": reply["content"]})

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """The prompt's tokens by this server's dense tokenizer (0 without `token_density`)."""
        if not self.token_density:
            return 0
        texts = [_message_text(m) for m in body.get("messages", [])]
        tools = json.dumps(body["tools"]) if body.get("tools") else ""
        return sum(dense_tokens(t, self.token_density) + 4 for t in texts) + dense_tokens(
            tools, self.token_density
        )

    def _context_refusal(self, body: dict[str, Any]) -> Reply:
        prompt, completion = self.prompt_tokens(body), int(body.get("max_tokens") or 0)
        return error(
            400,
            f"This model's maximum context length is {self.context_size} tokens. However, you "
            f"requested {prompt + completion} tokens ({prompt} in the messages, {completion} in "
            "the completion). Please reduce the length of the messages or completion.",
            code="context_length_exceeded",
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        """llama.cpp's `POST /tokenize` {"content": text} -> {"tokens": [...]}, when served."""
        body = await request.json()
        body["_in_flight"] = self.in_flight  # chat requests being answered meanwhile
        self.tokenize_requests.append(body)
        if not self.tokenize_endpoint:
            raise web.HTTPNotFound()
        count = dense_tokens(str(body.get("content", "")), self.token_density or 1.0)
        return web.json_response({"tokens": list(range(count))})

    async def models(self, request: web.Request) -> web.Response:
        if not self.models_endpoint:
            raise web.HTTPNotFound()
        ids = self.listed_models
        if ids is None:
            ids = list(dict.fromkeys(["fake", *(str(r.get("model")) for r in self.requests)]))
        owner = self.models_owned_by
        data = [{"id": name, "object": "model", "owned_by": owner} for name in ids]
        return web.json_response({"object": "list", "data": data})

    async def openapi(self, request: web.Request) -> web.Response:
        """A FastAPI server's description of itself (its title, here), as llama-cpp-python's."""
        if self.openapi_title is None:
            raise web.HTTPNotFound()
        return web.json_response({"openapi": "3.1.0", "info": {"title": self.openapi_title}})

    async def props(self, request: web.Request) -> web.Response:
        """llama.cpp's `GET /props`: the server's settings, `total_slots` among them."""
        if self.props_slots is None:
            raise web.HTTPNotFound()
        return web.json_response({"total_slots": self.props_slots, "chat_template": ""})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_post("/v1/audio/transcriptions", self.transcribe)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/props", self.props)
        app.router.add_get("/openapi.json", self.openapi)
        return app


async def start_fake_llm(host: str = "127.0.0.1", port: int = 0) -> tuple[FakeLLM, web.AppRunner]:
    """Start a FakeLLM; its `url` is the base URL to give the SDK (ends in /v1)."""
    fake = FakeLLM()
    fake._arrived = asyncio.Condition()
    runner = web.AppRunner(fake.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = runner.addresses[0][1]
    fake.url = f"http://{host}:{bound}/v1"
    return fake, runner


def main() -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible server for trying memgate")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument(
        "--exec", help="where `exec` is offered, call it with this command; answer its result"
    )
    args = parser.parse_args()

    def run_exec(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        asked = max(i for i, m in enumerate(messages) if m.get("role") == "user")
        results = [m["content"] for m in messages[asked:] if m.get("role") == "tool"]
        if results:  # this turn's call came back (earlier turns' stay in the history)
            return text(f"exec said: {results[-1]}")
        offered = [tool["function"]["name"] for tool in body.get("tools", [])]
        if "exec" in offered:
            return tool_call("exec", {"command": args.exec})
        return text(f"echo: {last_user_text(body)}")

    async def start() -> tuple[web.AppRunner, str]:
        fake, runner = await start_fake_llm(port=args.port)
        fake.delay = args.delay
        if args.exec:
            fake.default = run_exec
        return runner, f"fake LLM listening on {fake.url} (any api key, any model)"

    serve_until_interrupted(start)


if __name__ == "__main__":
    main()
