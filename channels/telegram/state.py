"""Which Telegram updates were already handled: the newest update_id and date, kept in a file.

`telegram-<bot id>.json` in the state folder, keyed by the bot's id (public, unlike the token), so
another bot starts afresh. Imports only `memory.fileio` of ours; no SDK.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from memory.fileio import atomic_write

log = logging.getLogger(__name__)


class UpdateCursor:
    """The newest handled update, so an update Telegram sends again is recognised as a repeat."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last_update_id = 0
        self.last_date = 0  # Telegram's date of the newest handled message, epoch seconds

    def handled(self, update_id: int, date: int) -> bool:
        # Telegram picks a random update_id after a week of silence, so a lower id is a repeat
        # only if its message is no newer than the newest one already handled.
        return update_id <= self.last_update_id and date <= self.last_date

    def record(self, update_id: int, date: int) -> None:
        self.last_update_id = update_id
        self.last_date = max(self.last_date, date)

    def load(self) -> None:
        """Read the file (blocking); a missing one is a first start, a broken one is logged."""
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
            self.last_update_id = int(state["last_update_id"])
            self.last_date = int(state.get("last_date", 0))
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            log.warning("telegram ignoring unreadable state path=%s error=%s", self.path, exc)

    def save(self) -> None:
        """Write the file (blocking); a failure is logged: the inbox still holds the updates."""
        state = {"last_update_id": self.last_update_id, "last_date": self.last_date}
        try:
            atomic_write(self.path, json.dumps(state).encode())
        except OSError as exc:
            log.warning("telegram could not save state path=%s error=%s", self.path, exc)
