"""A bounded memory of ids a channel has taken or made: events already journaled, messages and
threads of the bot's. A long-running process must not grow with every message it ever saw; what
it forgets is far older than anything that could come again (a platform's retry, a replay after
a restart) or be replied to (the bot's posts of long ago)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class Seen:
    """The last `size` ids remembered, the oldest forgotten first."""

    def __init__(self, ids: Iterable[str] = (), size: int = 4096) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._size = size
        for key in ids:
            self.add(key)

    def __contains__(self, key: object) -> bool:
        return key in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, key: str) -> None:
        self._ids[key] = None
        self._ids.move_to_end(key)
        while len(self._ids) > self._size:
            self._ids.popitem(last=False)

    def check(self, *keys: str) -> bool:
        """True when any of `keys` was seen; all of them are remembered from now on (an empty
        key is left out)."""
        keys = tuple(key for key in keys if key)
        seen = any(key in self._ids for key in keys)
        for key in keys:
            self.add(key)
        return seen
