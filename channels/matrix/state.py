"""What the Matrix adapter keeps in the state folder between runs: the login (access token and
device, so a restart is the same device and its transaction ids still deduplicate), and the
sync position (the since-token, and the encrypted rooms already told the bot cannot read them).

`matrix-<user>-session.json` and `matrix-<user>-sync.json`, keyed by the bot's user id (public).
Imports only `memory.fileio` of ours; no SDK.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from memory.fileio import atomic_write

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def file_stem(user_id: str) -> str:
    """`matrix-<user>` with the id made one plain file name (`@bot:example.org` →
    `matrix-bot_example.org`)."""
    return "matrix-" + _UNSAFE.sub("_", user_id.lstrip("@"))


@dataclass
class Login:
    """A device memgate logged in as: reused at the next start instead of a new login."""

    homeserver: str
    user_id: str
    device_id: str
    access_token: str


def load_login(path: Path) -> Login | None:
    """The kept login, or None (none yet, or unreadable: logged). Blocking."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Login(
            str(raw["homeserver"]),
            str(raw["user_id"]),
            str(raw["device_id"]),
            str(raw["access_token"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        log.warning("matrix ignoring unreadable login path=%s error=%s", path, exc)
        return None


def save_login(path: Path, login: Login) -> None:
    """Keep the login (the file is 0600: it holds the access token). Blocking."""
    data = {
        "homeserver": login.homeserver,
        "user_id": login.user_id,
        "device_id": login.device_id,
        "access_token": login.access_token,
    }
    atomic_write(path, json.dumps(data, indent=2) + "\n")


@dataclass
class SyncPosition:
    """Where /sync goes on from, and the encrypted rooms already told."""

    path: Path | None  # None: kept in memory only
    since: str | None = None
    told_encrypted: set[str] = field(default_factory=set)

    def load(self) -> None:
        """Read the file (blocking); a missing one is a first start, a broken one is logged."""
        if self.path is None:
            return
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            self.since = str(raw["since"]) if raw.get("since") else None
            self.told_encrypted = {str(room) for room in raw.get("told_encrypted", [])}
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            log.warning("matrix ignoring unreadable sync state path=%s error=%s", self.path, exc)

    def save(self) -> None:
        """Write the file (blocking); a failure is logged: the next start syncs from the older
        token, and the inbox recognises the events it already holds."""
        if self.path is None:
            return
        data = {"since": self.since, "told_encrypted": sorted(self.told_encrypted)}
        try:
            atomic_write(self.path, json.dumps(data) + "\n")
        except OSError as exc:
            log.warning("matrix could not save sync state path=%s error=%s", self.path, exc)
