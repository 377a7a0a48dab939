"""Clients made at their first use and closed at exit only if they were made.

The consolidation model and the speech-to-text client each hold a connection pool and a TLS
context of their own. A `memgate chat -m` that never consolidates, or a gateway that never gets
a voice note, never pays for them. The chat model's client is made by its first call too, its
module (the openai SDK, about half a second of the interpreter) imported in a worker thread: a
gateway is connected and healthy without it (`memgate run` loads it as soon as its channels are
up, see `preload`).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from gateway.collector import collector_paused
from gateway.llm.types import ChatProvider, ChatResponse, RestartSink, TextSink

PROVIDER_MODULE = "gateway.llm.provider"  # the client's module: the one that imports openai


async def preload(module: str = PROVIDER_MODULE) -> None:
    """Import `module` in a worker thread (a call already made waits for the same import), the
    collector paused meanwhile."""
    await asyncio.to_thread(_import, module)


def _import(module: str) -> None:
    with collector_paused():
        importlib.import_module(module)


class Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


class OnDemand(Generic[C]):
    """Holds `make` until the first `get()`; `close()` closes what was made, if anything."""

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._made: C | None = None

    @property
    def made(self) -> bool:
        return self._made is not None

    def get(self) -> C:
        if self._made is None:
            self._made = self._make()
        return self._made

    async def close(self) -> None:
        if self._made is not None:
            await self._made.close()


class Transcribing(Closable, Protocol):
    async def transcribe(self, filename: str, data: bytes) -> str: ...


class OnDemandTranscriber:
    """A transcriber whose client is made by the first voice note."""

    def __init__(self, make: Callable[[], Transcribing]) -> None:
        self.client: OnDemand[Transcribing] = OnDemand(make)

    async def transcribe(self, filename: str, data: bytes) -> str:
        return await self.client.get().transcribe(filename, data)

    async def close(self) -> None:
        await self.client.close()


class LazyProvider:
    """A `ChatProvider` whose client `make()` builds at the first call, once its module is
    imported (off the event loop); `close()` closes it if it was made."""

    def __init__(self, model: str, make: Callable[[], ChatProvider]) -> None:
        self.model = model
        self._make = make
        self._made: ChatProvider | None = None
        self._making = asyncio.Lock()

    async def _client(self) -> ChatProvider:
        if self._made is None:
            async with self._making:
                if self._made is None:
                    await preload()
                    self._made = self._make()
        return self._made

    def __getattr__(self, name: str) -> Any:
        # What callers read of a made client beside the calls (tool_support, endpoint): only
        # reached for names this class does not have, so an error names the attribute.
        if self._made is None:
            raise AttributeError(f"{name} (the model's client is made by its first call)")
        return getattr(self._made, name)

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ChatResponse:
        client = await self._client()
        return await client.chat(messages, tools, tool_choice, max_tokens=max_tokens)

    async def stream_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        on_text: TextSink,
        on_restart: RestartSink | None = None,
    ) -> ChatResponse:
        client = await self._client()
        return await client.stream_chat(messages, tools, on_text=on_text, on_restart=on_restart)

    async def close(self) -> None:
        close = getattr(self._made, "close", None)
        if close is not None:
            await close()
