"""The console's secret and what it signs: one-time login tickets, session cookies, CSRF tokens.

The secret is a random token in the state folder (0600), made by whichever of `memgate run` and
`memgate console` comes first. `memgate console` signs a short-lived ticket with it for the login
URL it prints; the server takes each ticket once and answers with a signed session cookie. Nothing
is stored server-side but the tickets already taken (`console-tickets.json` until they expire, so
a restart does not make one good again): a restart keeps sessions valid, and deleting the token
file logs every browser out.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from pathlib import Path

from memory.fileio import atomic_write, create_exclusive, ensure_private_dir

log = logging.getLogger(__name__)

TOKEN_FILE = "console-token"  # its name in the state folder
USED_FILE = "console-tickets.json"  # the login tickets taken, until they expire
TICKET_LIFE = 600.0  # seconds a printed login URL stays good (and usable once)
SESSION_LIFE = 7 * 86400.0  # seconds a browser stays logged in


def console_secret(state_dir: Path) -> bytes:
    """The console's secret, made on first use (an exclusive create: two first users agree)."""
    path = state_dir / TOKEN_FILE
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    ensure_private_dir(state_dir)
    try:
        create_exclusive(path, secrets.token_urlsafe(32) + "\n")
    except FileExistsError:
        pass  # made by the other process meanwhile: theirs is the one
    return _read(path)


def _read(path: Path) -> bytes:
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < 16:
        raise ValueError(f"{path}: the console token is too short; delete the file to make one")
    return token.encode()


def _sign(secret: bytes, *parts: str) -> str:
    return hmac.new(secret, "|".join(parts).encode(), hashlib.sha256).hexdigest()


def login_ticket(secret: bytes, now: float | None = None) -> str:
    """A ticket for one login within TICKET_LIFE: `nonce.expiry.signature`."""
    nonce = secrets.token_urlsafe(12)
    expires = str(int((time.time() if now is None else now) + TICKET_LIFE))
    return f"{nonce}.{expires}.{_sign(secret, 'login', nonce, expires)}"


class Tickets:
    """The server's side of login tickets: each good one is taken once."""

    def __init__(self, secret: bytes, used_file: Path | None = None) -> None:
        """`used_file`: where the tickets taken are kept until they expire, so that a restart
        of the server does not make a used login URL good again."""
        self.secret = secret
        self._file = used_file
        self._used: dict[str, float] = {}  # nonce -> its expiry, forgotten once past it
        if used_file is not None:
            self._used = _load_used(used_file)

    def take(self, ticket: str, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        self._used = {nonce: until for nonce, until in self._used.items() if until > now}
        nonce, expires, signature = _split(ticket)
        if not _fresh(expires, now) or nonce in self._used:
            return False
        if not hmac.compare_digest(signature, _sign(self.secret, "login", nonce, expires)):
            return False
        self._used[nonce] = float(expires)
        if self._file is not None:
            # Kept before the login is let in: a kill after it cannot make the ticket good again.
            try:
                atomic_write(self._file, json.dumps(self._used, sort_keys=True) + "\n")
            except OSError as exc:  # a full disk: this run still refuses it a second time
                log.warning("console used tickets not saved path=%s error=%r", self._file, exc)
        return True

    def session_cookie(self, now: float | None = None) -> str:
        """A signed session value: `id.expiry.signature`."""
        ident = secrets.token_urlsafe(12)
        expires = str(int((time.time() if now is None else now) + SESSION_LIFE))
        return f"{ident}.{expires}.{_sign(self.secret, 'session', ident, expires)}"

    def valid_session(self, cookie: str, now: float | None = None) -> bool:
        ident, expires, signature = _split(cookie)
        if not _fresh(expires, time.time() if now is None else now):
            return False
        return hmac.compare_digest(signature, _sign(self.secret, "session", ident, expires))

    def csrf(self, cookie: str) -> str:
        """The CSRF token of a session: every form of that session carries it."""
        return _sign(self.secret, "csrf", cookie)[:32]

    def valid_csrf(self, cookie: str, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.csrf(cookie).encode())


def _split(value: str) -> tuple[str, str, str]:
    parts = value.split(".")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else ("", "0", "")


def _fresh(expires: str, now: float) -> bool:
    return expires.isdigit() and int(expires) > now


def _load_used(path: Path) -> dict[str, float]:
    """The tickets taken before this start; an unreadable file is logged and taken as none
    (a ticket lives ten minutes: a used one could then be taken again within them)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning(
            "console used-ticket file unreadable, starting empty path=%s error=%r", path, exc
        )
        return {}
    if not isinstance(raw, dict):
        log.warning("console used-ticket file is not an object, starting empty path=%s", path)
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float))}
