"""Compatibility check against a real llama-cpp-python server (or any llama.cpp-family server).

`python -m bench.llamacpp_check --base-url http://127.0.0.1:8765/v1` drives memgate's own runtime
in this process (the agent, the session files, consolidation), each check on a fresh workspace in
a temporary folder, and prints one line per check: chat, streaming, a stream that another
client's request cuts off (the server's default), a forced save_memory consolidation, a context
overflow (the chat must answer its next message) and two chats at once.
It checks outcomes only (an answer given, stored once, shown whole), not the quality of a small
model's words. Exit status: 0 when every check passes, 1 when one fails, 2 when the server cannot
be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gateway.agent.turn_notes import RESTART_NOTE
from gateway.bus import InboundMessage, OutboundMessage
from gateway.config.file import parse_config
from gateway.service.app import Runtime, open_runtime

CONTEXT = 4096  # the server's n_ctx the checks assume (--context-window)
REPLY_TOKENS = 256  # llm.max_tokens: a small model's short replies
Check = Callable[[Runtime], Awaitable[str]]


class CheckFailed(Exception):
    """A check's outcome was not what memgate promises; the message says what was seen."""


class Shown:
    """A ReplyStream keeping what a channel would show: the text since the last note."""

    def __init__(self) -> None:
        self.pieces = 0
        self.restarts = 0
        self.text = ""
        self.began = asyncio.Event()

    async def write(self, text: str) -> None:
        self.pieces += 1
        self.text += text
        self.began.set()

    async def status(self, note: str) -> None:
        self.restarts += note == RESTART_NOTE
        self.text = ""


class Breaks(logging.Handler):
    """Counts the streams the provider found broken off (and asked again) during a check."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("stream broke off")


def models(base_url: str) -> list[str]:
    """The model ids the server lists; URLError/OSError when it cannot be reached."""
    with urllib.request.urlopen(f"{base_url.rstrip('/')}/models", timeout=10) as answer:
        body = json.load(answer)
    return [str(item.get("id")) for item in body.get("data", []) if isinstance(item, dict)]


def message(text: str, chat: str = "1") -> InboundMessage:
    return InboundMessage(
        channel="check", chat_id=chat, sender_id="1", text=text, sender_is_owner=True
    )


def stored_answers(runtime: Runtime, chat: str = "1") -> list[str]:
    """The assistant answers the session file holds (tool-call steps left out)."""
    path = runtime.sessions.path_for(f"check:{chat}")
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return [
        str(line.get("content"))
        for line in lines
        if line.get("role") == "assistant" and not line.get("tool_calls")
    ]


def answered(reply: OutboundMessage | None, what: str) -> OutboundMessage:
    if reply is None or reply.failed or not reply.text.strip():
        seen = "no reply" if reply is None else repr(reply.text[:160])
        raise CheckFailed(f"{what}: {seen}")
    return reply


async def check_chat(runtime: Runtime) -> str:
    reply = answered(await runtime.agent.handle(message("Say hello in one sentence.")), "reply")
    if stored_answers(runtime) != [reply.text]:
        raise CheckFailed(f"the session holds {stored_answers(runtime)!r}")
    return f"{len(reply.text)} characters, stored once"


async def check_streaming(runtime: Runtime) -> str:
    shown = Shown()
    ask = message("Tell me about the sea in three sentences.")
    reply = answered(await runtime.agent.handle(ask, shown), "streamed reply")
    if shown.text.strip() != reply.text:
        raise CheckFailed(f"shown {shown.text[:80]!r}… is not the answer {reply.text[:80]!r}…")
    if stored_answers(runtime) != [reply.text]:
        raise CheckFailed(f"the session holds {stored_answers(runtime)!r}")
    return f"{shown.pieces} pieces, {shown.restarts} restarts, shown whole and stored once"


def other_client(base_url: str, model: str) -> None:
    """One short completion from another client: llama-cpp-python's server ends the stream it
    is writing when a request arrives (`interrupt_requests`, on by default)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as answer:
        answer.read()


async def check_cut_stream(runtime: Runtime) -> str:
    shown, breaks = Shown(), Breaks()
    ask = message("Write a long story about a lighthouse keeper.")
    turn = asyncio.ensure_future(runtime.agent.handle(ask, shown))
    logging.getLogger("gateway.llm.provider").addHandler(breaks)
    try:
        async with asyncio.timeout(300):
            await shown.began.wait()
        if turn.done():
            raise CheckFailed("the answer was over before another request could be sent")
        llm = runtime.config.llm
        await asyncio.to_thread(other_client, llm.base_url, llm.model)
        reply = answered(await turn, "streamed reply")
    finally:
        turn.cancel()
        logging.getLogger("gateway.llm.provider").removeHandler(breaks)
    if not breaks.count:
        raise CheckFailed(
            "another request came while the answer streamed, and no broken stream was seen: "
            f"a cut answer ({len(reply.text)} characters) was taken as whole "
            "(unless the server runs with --interrupt_requests False)"
        )
    if shown.text.strip() != reply.text:
        raise CheckFailed(f"shown {shown.text[:80]!r}… is not the answer {reply.text[:80]!r}…")
    if stored_answers(runtime) != [reply.text]:
        raise CheckFailed(f"the session holds {stored_answers(runtime)!r}")
    return f"{shown.restarts} restarts, shown whole and stored once ({len(reply.text)} characters)"


async def check_consolidation(runtime: Runtime) -> str:
    facts = ("My name is Ada.", "I live in Lyon.", "I like green tea.")
    for fact in facts:
        answered(await runtime.agent.handle(message(fact)), "reply")
    async with asyncio.timeout(600):
        await runtime.consolidator.wait_idle()
    history = runtime.memory.read_history()
    if not history.strip():
        raise CheckFailed("HISTORY.md has no entry")
    if "[RAW]" in history:
        raise CheckFailed("the chunk ended [RAW]: the model's save_memory never validated")
    return f"HISTORY.md {len(history)} characters, MEMORY.md {len(runtime.memory.read_memory())}"


async def check_overflow(runtime: Runtime) -> str:
    # Digits: OpenAI's tokenizer takes three a token, a llama-family one (SmolLM2's) one each,
    # so this fits memgate's count of the budget and not the server's context.
    digits = "".join(str(n % 10) for n in range(4500))
    first = await runtime.agent.handle(message(f"Remember this number: {digits}"))
    said = "no reply" if first is None else ("failed" if first.failed else "answered")
    reply = answered(await runtime.agent.handle(message("Say hello.")), "the next message")
    async with asyncio.timeout(600):
        await runtime.consolidator.wait_idle()
    # Reported, not judged: the chat goes on either way; a raw chunk is memory not distilled.
    raw = "; its consolidation ended [RAW]" if "[RAW]" in runtime.memory.read_history() else ""
    return f"the big message: {said}; the next one answered ({len(reply.text)} characters){raw}"


async def check_two_chats(runtime: Runtime) -> str:
    shown = (Shown(), Shown())
    asks = ("Name three colours.", "Name three animals.")
    replies = await asyncio.gather(
        *(
            runtime.agent.handle(message(ask, chat), stream)
            for ask, chat, stream in zip(asks, ("1", "2"), shown, strict=True)
        )
    )
    for chat, reply, stream in zip(("1", "2"), replies, shown, strict=True):
        answer = answered(reply, f"chat {chat}")
        if stream.text.strip() != answer.text:
            raise CheckFailed(f"chat {chat} shows {stream.text[:80]!r}… not its answer")
        if stored_answers(runtime, chat) != [answer.text]:
            raise CheckFailed(f"chat {chat}'s session holds {stored_answers(runtime, chat)!r}")
    return f"both answered, shown whole, stored once ({sum(s.restarts for s in shown)} restarts)"


CHECKS: dict[str, tuple[Check, dict[str, Any]]] = {
    "chat": (check_chat, {}),
    "streaming": (check_streaming, {}),
    "stream cut by another client": (check_cut_stream, {}),
    "save_memory": (check_consolidation, {"memory": {"window": 6}}),
    "context overflow": (check_overflow, {}),
    "two chats at once": (check_two_chats, {}),
}


def config_for(root: Path, base_url: str, model: str, context: int, extra: dict[str, Any]) -> Any:
    raw: dict[str, Any] = {
        "workspace": str(root / "workspace"),
        "state_dir": str(root / "state"),
        "llm": {
            "base_url": base_url,
            "api_key": "",
            "model": model,
            "context_window": context,
            "max_tokens": REPLY_TOKENS,
            "timeout": 300,
            "max_retries": 1,
        },
        # A CPU writing MEMORY.md whole under a grammar: minutes on two busy cores, not 120 s.
        "memory": {"timeout": 600},
    }
    for section, values in extra.items():
        raw[section] = {**raw.get(section, {}), **values}
    return parse_config(raw, root / "config.yaml", env={})


async def run_check(name: str, base_url: str, model: str, context: int) -> bool:
    check, extra = CHECKS[name]
    started = time.monotonic()
    breaks = Breaks()
    provider_log = logging.getLogger("gateway.llm.provider")
    provider_log.addHandler(breaks)
    try:
        with tempfile.TemporaryDirectory(prefix="memgate-llamacpp-") as folder:
            config = config_for(Path(folder), base_url, model, context, extra)
            async with open_runtime(config) as runtime:
                detail = await check(runtime)
        verdict = "PASS"
    except CheckFailed as exc:
        verdict, detail = "FAIL", str(exc)
    except Exception as exc:  # a crash of memgate is this check's failure, not the script's
        verdict, detail = "FAIL", f"{type(exc).__name__}: {exc}"
    finally:
        provider_log.removeHandler(breaks)
    seconds = time.monotonic() - started
    print(
        f"{verdict}  {name}: {detail}; {breaks.count} streams broken off ({seconds:.0f}s)",
        flush=True,
    )
    return verdict == "PASS"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base-url", default="http://127.0.0.1:8765/v1")
    parser.add_argument("--model", help="the model name (default: the first /v1/models lists)")
    parser.add_argument("--context-window", type=int, default=CONTEXT, help="the server's n_ctx")
    parser.add_argument("--only", action="append", choices=list(CHECKS), help="run this check")
    args = parser.parse_args(argv)
    # memgate's own warnings (a retried stream, a failed consolidation) under the check's line.
    logging.basicConfig(level=logging.WARNING, format="      log: %(name)s: %(message)s")
    try:
        listed = models(args.base_url)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"server not reachable at {args.base_url}: {exc}", file=sys.stderr)
        return 2
    model = args.model or (listed[0] if listed else "")
    if not model:
        print(f"{args.base_url}/models lists no model; pass --model", file=sys.stderr)
        return 2
    print(f"server {args.base_url}, model {model}, context {args.context_window}", flush=True)
    results = [
        asyncio.run(run_check(name, args.base_url, model, args.context_window))
        for name in args.only or list(CHECKS)
    ]
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
