"""The one fake LLM both systems talk to: memgate's test fake (tests/fakes/llm.py), served from a
thread of the orchestrator so its CPU time never lands in a driver's process.

Two additions, both outside the fake itself: a reply function that answers either system's
consolidation prompt the same way (the test fake's default one reads memgate's prompt only), and
`/bench/*` routes through which a driver can read counts and ask for the next consolidation call
to be held.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from typing import Any

from aiohttp import web

from tests.fakes.llm import FakeLLM, Reply, is_consolidation, last_user_text, text, tool_call

# memgate: "## Current MEMORY.md\n\n…\n\n## Conversation to consolidate\n\n…";
# nanobot: "## Current Long-term Memory\n…\n\n## Conversation to Process\n…".
_PROMPT = re.compile(
    r"## Current [^\n]*\n+(?P<memory>.*?)\n+## Conversation[^\n]*\n+(?P<chat>.*)", re.S
)
# nanobot puts its runtime block before the person's text, separated by a blank line.
_NANOBOT_RUNTIME = "[Runtime Context"


def person_text(body: dict[str, Any]) -> str:
    """What the person wrote in the last user message, without either system's runtime block."""
    content = last_user_text(body)  # strips memgate's block
    if content.startswith(_NANOBOT_RUNTIME):
        content = content.partition("\n\n")[2]
    return content


def bench_reply(body: dict[str, Any]) -> Reply:
    """Echo chat turns; answer a consolidation with a summary and MEMORY.md plus one fact line."""
    if not is_consolidation(body):
        return text(f"echo: {person_text(body)}")
    match = _PROMPT.search(last_user_text(body))
    memory = match.group("memory").strip() if match else ""
    memory = "" if memory == "(empty)" else memory
    lines = [
        line for line in (match.group("chat") if match else "").splitlines() if line[:1] == "["
    ]
    stamp = lines[-1][:18] if lines else "[2026-01-01 00:00]"
    summary = (
        f"{stamp} Summary of {len(lines)} messages, starting: {lines[0][19:80] if lines else ''}"
    )
    fact = f"- A fact learned from {len(lines)} messages."
    return tool_call(
        "save_memory", {"history_entry": summary, "memory_update": f"{memory}\n{fact}\n"}
    )


class BenchLLM:
    """The fake in a background thread: `start()` returns its base URL, `stop()` ends it."""

    def __init__(self) -> None:
        self.fake = FakeLLM(default=bench_reply)
        self._hold = 0.0
        self._held = 0
        self._keep = False
        self._counts = {"chat": 0, "consolidation": 0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-llm", daemon=True)
        self.url = ""

    # -- routes ------------------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()  # aiohttp keeps the body: the fake reads it again
        kind = "consolidation" if is_consolidation(body) else "chat"
        self._counts[kind] += 1
        if kind == "consolidation" and self._hold > 0:
            seconds, self._hold = self._hold, 0.0
            self._held += 1
            try:
                await asyncio.sleep(seconds)
            finally:
                self._held -= 1
        try:
            return await self.fake.handle(request)
        finally:
            if not self._keep:  # most figures only need counts; bodies of 10k prompts add up
                self.fake.requests.clear()

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response({**self._counts, "held": self._held})

    async def _hold_next(self, request: web.Request) -> web.Response:
        self._hold = float((await request.json())["seconds"])
        return web.json_response({"ok": True})

    # -- lifecycle ---------------------------------------------------------------------------------
    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self.fake.models)
        app.router.add_get("/bench/stats", self._stats)
        app.router.add_post("/bench/hold", self._hold_next)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock, backlog=1024).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    def start(self) -> str:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake LLM did not start")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    # -- what the orchestrator reads ---------------------------------------------------------------
    def _on_loop(self, func: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(_call(func), self._loop).result(10)

    def reset(self, *, keep_requests: bool = False) -> None:
        """Forget counts and recorded requests; record the next ones only if `keep_requests`."""

        def clear() -> None:
            self.fake.requests.clear()
            self._counts = {"chat": 0, "consolidation": 0}
            self._hold = 0.0
            self._keep = keep_requests

        self._on_loop(clear)

    def write_slowly(self, answer: str | None, rate: float = 0.0) -> None:
        """Answer chat turns with `answer`, written at `rate` tokens a second whether streamed or
        not (consolidations as before); None: echo at once again."""

        def chat(body: dict[str, Any]) -> Reply:
            return bench_reply(body) if answer is None or is_consolidation(body) else text(answer)

        def switch() -> None:
            self.fake.default = chat
            self.fake.stream_rate = rate

        self._on_loop(switch)

    def requests(self) -> list[dict[str, Any]]:
        """A copy of every request recorded since the last reset."""
        return self._on_loop(lambda: list(self.fake.requests))


async def _call(func: Any) -> Any:
    return func()
