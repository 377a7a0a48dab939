"""Per-session ordering: one asyncio.Lock per session key, kept only while someone needs it.

Turns of one session run one after the other; the table forgets a key as soon as nobody holds or
waits for its lock, so it does not grow with every chat ever seen.
"""

from __future__ import annotations

import asyncio


class SessionLock:
    """`async with SessionLock(table, key)`: the lock of `key` in `table`, shared by every user."""

    def __init__(self, table: dict[str, tuple[asyncio.Lock, int]], key: str) -> None:
        self._table = table
        self._key = key

    async def __aenter__(self) -> None:
        lock, users = self._table.get(self._key, (asyncio.Lock(), 0))
        self._table[self._key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            # Cancelled while waiting: this user no longer counts.
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._table[self._key][0].release()
        self._leave()

    def _leave(self) -> None:
        lock, users = self._table[self._key]
        if users <= 1:
            del self._table[self._key]
        else:
            self._table[self._key] = (lock, users - 1)
