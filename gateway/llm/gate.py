"""The endpoint gate: at most `llm.max_concurrency` requests in flight to one model server, the
rest waiting in memgate, replies ahead of consolidation.

A single-slot server (llama.cpp with one slot, llama-cpp-python) queues what it cannot run, and
the client's timeout counts that wait: a reply behind a long consolidation timed out, and its
retry queued again. Waiting here instead, a request's timeout starts when it is sent (the
provider's own timers start inside its call, after the gate), and the wait goes in priority
order, which the server's queue does not know. A reply that called tools keeps its place while
they run (at most KEEP_FOR_TURN seconds): its next request is part of the same answer, and a
consolidation that took the place between them would hold the reply for the whole of its run.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from enum import IntEnum
from typing import Any

from gateway.llm.server_info import Concurrency, concurrency, read_profile
from gateway.llm.types import ChatProvider, ChatResponse, RestartSink, TextSink

log = logging.getLogger(__name__)

KEEP_FOR_TURN = 10.0  # seconds a reply's place waits for its next request while its tools run


class Priority(IntEnum):
    """Lower goes first: someone waits for a reply; nobody waits for consolidation."""

    REPLY = 0
    BACKGROUND = 1


class Place:
    """One request's place at the gate; `keep`: hold it for the same reply's next request."""

    keep = False


class EndpointGate:
    """Admits up to `limit` requests at once; the others wait, by priority, then in arrival order.

    The limit is known at the first request: given, or read by `detect` once (a server's slot
    count), so building the runtime never waits on the network.
    """

    def __init__(self, detect: Callable[[], Awaitable[Concurrency]]) -> None:
        self._detect = detect
        self.concurrency: Concurrency | None = None
        self._detecting = asyncio.Lock()
        self._in_flight = 0
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        # Places replies keep for their next request, oldest first; each lapses on its timer.
        self._kept: dict[object, asyncio.TimerHandle] = {}

    @property
    def waiting(self) -> int:
        """Requests waiting for a place."""
        return len(self._waiting)

    @asynccontextmanager
    async def slot(self, priority: Priority) -> AsyncIterator[Place]:
        """Held while one request is in flight; a reply may set `keep` on the place it gets."""
        await self._acquire(priority)
        place = Place()
        try:
            yield place
        finally:
            if place.keep and priority is Priority.REPLY:
                self._keep()
            else:
                self._release()

    async def _limit(self) -> int:
        if self.concurrency is None:
            async with self._detecting:
                if self.concurrency is None:
                    self.concurrency = await self._detect()
                    log.info("endpoint concurrency %s", self.concurrency.describe())
        return self.concurrency.limit

    async def _acquire(self, priority: Priority) -> None:
        limit = await self._limit()
        if self._in_flight < limit and not self._waiting:
            self._in_flight += 1
            return
        if priority is Priority.REPLY and self._kept:  # a kept place: replies take it first
            self._kept.pop(next(iter(self._kept))).cancel()
            return
        entry = (int(priority), next(self._order), asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, entry)
        try:
            await entry[2]  # `_release` hands its place over: _in_flight stays as it is
        except asyncio.CancelledError:
            if entry[2].cancelled():
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
            else:  # handed a place in the same moment: pass it on
                self._release()
            raise

    def _keep(self) -> None:
        """The place stays taken until a reply asks for it, or KEEP_FOR_TURN seconds pass; a
        reply already waiting gets it at once."""
        if any(priority == Priority.REPLY for priority, _, _ in self._waiting):
            self._release()
            return
        token = object()
        loop = asyncio.get_running_loop()
        self._kept[token] = loop.call_later(KEEP_FOR_TURN, self._lapse, token)

    def _lapse(self, token: object) -> None:
        if self._kept.pop(token, None) is not None:
            self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, future = heapq.heappop(self._waiting)
            if not future.done():
                future.set_result(None)
                return
        self._in_flight -= 1


class GatedProvider:
    """A `ChatProvider` whose every call first takes a place at its endpoint's gate.

    The place is held for the whole call, the inner provider's retries and fallbacks included:
    they are one answer to the server, and its timeouts start inside the call.
    """

    def __init__(self, inner: ChatProvider, gate: EndpointGate, priority: Priority) -> None:
        self.inner = inner
        self.gate = gate
        self.priority = priority
        self.model = inner.model

    def __getattr__(self, name: str) -> Any:
        # What callers read of a provider beside the calls: tool_support, vision_support,
        # endpoint. Only reached for names this class does not have.
        return getattr(self.inner, name)

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ChatResponse:
        async with self.gate.slot(self.priority) as place:
            response = await self.inner.chat(messages, tools, tool_choice, max_tokens=max_tokens)
            place.keep = bool(response.tool_calls)  # the same answer asks again after its tools
            return response

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
        on_restart: RestartSink | None = None,
    ) -> ChatResponse:
        async with self.gate.slot(self.priority) as place:
            response = await self.inner.stream_chat(
                messages, tools, on_text=on_text, on_restart=on_restart
            )
            place.keep = bool(response.tool_calls)
            return response

    async def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            await close()


def endpoint_gate(base_url: str, api_key: str, setting: int | str, timeout: float) -> EndpointGate:
    """The gate of one endpoint: `setting` (`llm.max_concurrency`) requests at once, or with
    "auto" what the server says of itself (read within `timeout`), else the default."""

    async def detect() -> Concurrency:
        if isinstance(setting, int):
            return concurrency(setting, None)
        profile = await read_profile(base_url, api_key, timeout, listing=False)
        return concurrency(setting, profile)

    return EndpointGate(detect)
