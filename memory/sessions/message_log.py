"""A session's messages by their position in the file, of which only the tail is held in memory.

A long session is loaded from the first message a turn can use (the consolidation pointer, or a
little earlier): positions keep counting every message line of the file, so the pointer, a stored
turn's index and the consolidation chunks mean the same as if the whole file were loaded. Asking
for a message before `base` is an error, never a silent gap.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from memory.errors import HistoryNotLoadedError
from memory.sessions.file import Message


class MessageLog(Sequence[Message]):
    """Messages `base`, `base + 1`, … of a session; `len()` counts the ones before `base` too."""

    def __init__(self, base: int = 0, loaded: list[Message] | None = None) -> None:
        if base < 0:
            raise ValueError(f"base must be >= 0, not {base}")
        self._base = base
        self._loaded = [] if loaded is None else loaded

    @property
    def base(self) -> int:
        """Position of the first message held in memory."""
        return self._base

    @property
    def loaded(self) -> list[Message]:
        """The messages held in memory, from `base` on."""
        return self._loaded

    def __len__(self) -> int:
        return self._base + len(self._loaded)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("a session's messages are sliced in order only")
            if stop <= start:
                return []
            self._check(start)
            return self._loaded[start - self._base : stop - self._base]
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(f"message {index} of {len(self)}")
        self._check(position)
        return self._loaded[position - self._base]

    def __iter__(self) -> Iterator[Message]:
        """The loaded messages only: what lies before `base` is consolidated and stays on disk."""
        return iter(self._loaded)

    def __reversed__(self) -> Iterator[Message]:
        return reversed(self._loaded)

    def append(self, message: Message) -> None:
        self._loaded.append(message)

    def upto(self, count: int) -> MessageLog:
        """The first `count` messages as a log of their own, which later appends leave alone (for
        work in a worker thread while the event loop goes on storing turns)."""
        return MessageLog(self._base, self._loaded[: max(0, count - self._base)])

    def _check(self, position: int) -> None:
        if position < self._base:
            raise HistoryNotLoadedError(
                f"message {position} is before the loaded part (from {self._base})"
            )
