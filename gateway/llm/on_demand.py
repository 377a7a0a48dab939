"""Clients made at their first use and closed at exit only if they were made.

The consolidation model and the speech-to-text client each hold a connection pool and a TLS
context of their own. A `memgate chat -m` that never consolidates, or a gateway that never gets
a voice note, never pays for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


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
