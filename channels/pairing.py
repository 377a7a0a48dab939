"""Pairing: the senders an owner let in without editing the config, and the codes that ask for it.

One JSON file in the state folder (`pairing.json`), shared by the running service (which hands out
codes and checks approvals on every message) and by `memgate pairing` (which approves, rejects and
revokes).
Every change is a read-modify-write under an exclusive lock on `pairing.lock`, so two processes
never lose each other's change; readers notice a new file by its inode and mtime, so a change takes
effect on the next message without a restart. Imports `memory.fileio`, `channels.errors` and
`gateway.bus` (how a command is typed) of ours.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from channels.errors import PairingError as PairingError  # the command line imports it here
from gateway.bus import typed_command
from memory.fileio import atomic_write, ensure_private_dir

log = logging.getLogger(__name__)

FILE_NAME = "pairing.json"
LOCK_NAME = "pairing.lock"
# No 0/O and no 1/I: a code read aloud or copied by hand from a phone cannot be mistyped that way.
ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL = 3600.0  # seconds a code stays valid
# Codes waiting per channel; more strangers get nothing until one is settled (approved, rejected or
# expired). The cap bounds what strangers can make the service write and the owner read.
MAX_PENDING = 3
REPLY_EVERY = 600.0  # seconds between two replies to the same stranger


@dataclass(frozen=True)
class Pending:
    """A code handed to a stranger, waiting for an owner's approval."""

    channel: str
    code: str
    sender_id: str
    name: str
    created_at: float  # epoch seconds
    replied_at: float

    def expired(self, now: float) -> bool:
        return now >= self.created_at + CODE_TTL


@dataclass(frozen=True)
class Approved:
    """A sender let in by an owner: who approved it, and when."""

    channel: str
    sender_id: str
    name: str
    approved_by: str
    approved_at: float

    @property
    def address(self) -> str:
        return f"{self.channel}:{self.sender_id}"


@dataclass(frozen=True)
class Answer:
    """What to do with a stranger's DM: the code to show them, or None to stay silent."""

    code: str | None
    reply: bool


@dataclass(frozen=True)
class Rejected:
    """A sender whose code an owner rejected: they get no new code until `CODE_TTL` has passed, so
    rejecting a stranger who keeps writing frees their place for good, not for one message."""

    channel: str
    sender_id: str
    name: str
    rejected_at: float

    @property
    def address(self) -> str:
        return f"{self.channel}:{self.sender_id}"

    def expired(self, now: float) -> bool:
        return now >= self.rejected_at + CODE_TTL


@dataclass
class _Table:
    pending: list[Pending]
    approved: list[Approved]
    rejected: list[Rejected]


def new_code() -> str:
    """Eight characters from the look-alike-free alphabet, from the OS's cryptographic RNG."""
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds")


def _epoch(text: Any) -> float:
    return dt.datetime.fromisoformat(str(text)).timestamp()


class PairingStore:
    """Approved senders and pending codes of every channel, kept in `STATE/pairing.json`.

    `clock` returns epoch seconds; tests pass their own to expire codes without waiting.
    """

    def __init__(self, state_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(state_dir) / FILE_NAME
        self._lock_path = Path(state_dir) / LOCK_NAME
        self._clock = clock
        self._seen: tuple[int, int, int] | None = None  # (inode, mtime_ns, size) last read
        self._approved: frozenset[tuple[str, str]] = frozenset()
        self._crowded: set[tuple[str, str]] = set()  # strangers already logged as one too many

    # -- reading -----------------------------------------------------------------------------------
    def is_approved(self, channel: str, sender_id: str) -> bool:
        """Whether an owner let this sender in; re-reads the file only when it changed."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._approved = None, frozenset()
            return False
        except OSError as exc:
            # Fail closed as for an unreadable file: a sender is judged, not the channel broken.
            log.error("pairing file unreadable, approvals ignored: %s: %s", self.path, exc)
            self._seen, self._approved = None, frozenset()
            return False
        stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
        if stamp != self._seen:
            try:
                table = self._read()
            except PairingError as exc:
                # Fail closed: nobody is let in by a file we cannot read; the file is kept as is.
                log.error("pairing file unreadable, approvals ignored: %s", exc)
                table = _Table([], [], [])
            self._approved = frozenset((a.channel, a.sender_id) for a in table.approved)
            self._seen = stamp
        return (channel, sender_id) in self._approved

    def pending(self, channel: str | None = None) -> list[Pending]:
        """Codes still valid, oldest first."""
        now = self._clock()
        return [
            p for p in self._read().pending if not p.expired(now) and channel in (None, p.channel)
        ]

    def approved(self, channel: str | None = None) -> list[Approved]:
        return [a for a in self._read().approved if channel in (None, a.channel)]

    def rejected(self, channel: str | None = None) -> list[Rejected]:
        """Senders still held back after a rejection, oldest first."""
        now = self._clock()
        return [
            r for r in self._read().rejected if not r.expired(now) and channel in (None, r.channel)
        ]

    # -- changing ----------------------------------------------------------------------------------
    def request(self, channel: str, sender_id: str, name: str = "") -> Answer:
        """A stranger wrote: their code (new or the same as before), and whether to reply now."""
        with self._changing() as table:
            now = self._clock()
            mine = next(
                (p for p in table.pending if (p.channel, p.sender_id) == (channel, sender_id)),
                None,
            )
            if mine is not None:
                if now < mine.replied_at + REPLY_EVERY:
                    return Answer(mine.code, reply=False)
                table.pending[table.pending.index(mine)] = replace(mine, replied_at=now)
                return Answer(mine.code, reply=True)
            if any((r.channel, r.sender_id) == (channel, sender_id) for r in table.rejected):
                return Answer(None, reply=False)  # the rejection was logged; this adds nothing
            waiting = sum(p.channel == channel for p in table.pending)
            if waiting >= MAX_PENDING:
                if (channel, sender_id) not in self._crowded:
                    self._crowded.add((channel, sender_id))
                    log.warning(
                        "pairing refused channel=%s sender_id=%s: %d codes already wait for "
                        "approval (memgate pairing list)",
                        channel,
                        sender_id,
                        waiting,
                    )
                return Answer(None, reply=False)
            taken = {p.code for p in table.pending}
            code = new_code()
            while code in taken:
                code = new_code()
            table.pending.append(Pending(channel, code, sender_id, name, now, now))
            self._crowded.discard((channel, sender_id))
            log.info(
                "pairing code issued channel=%s sender_id=%s (memgate pairing list shows it)",
                channel,
                sender_id,
            )
            return Answer(code, reply=True)

    def approve(self, code: str, approved_by: str, channel: str | None = None) -> Approved:
        """Let in the sender holding `code` (of `channel` only, when given)."""
        with self._changing() as table:
            found = _pending_code(table, code, channel)
            table.pending.remove(found)
            table.approved = [
                a
                for a in table.approved
                if (a.channel, a.sender_id) != (found.channel, found.sender_id)
            ]
            approved = Approved(
                found.channel, found.sender_id, found.name, approved_by, self._clock()
            )
            table.approved.append(approved)
        log.info(
            "pairing approved channel=%s sender_id=%s by=%s",
            approved.channel,
            approved.sender_id,
            approved_by,
        )
        return approved

    def reject(self, code: str, channel: str | None = None) -> Pending:
        """Drop the code (of `channel` only, when given): its place is free for the next stranger,
        and its holder gets no new code for `CODE_TTL`."""
        with self._changing() as table:
            found = _pending_code(table, code, channel)
            self._reject(table, [found])
        return found

    def reject_all(self, channel: str | None = None) -> list[Pending]:
        """Drop every waiting code (of `channel` only, when given), as `reject` does one."""
        with self._changing() as table:
            found = [p for p in table.pending if channel in (None, p.channel)]
            self._reject(table, found)
        return found

    def _reject(self, table: _Table, codes: list[Pending]) -> None:
        now = self._clock()
        for pending in codes:
            table.pending.remove(pending)
            table.rejected = [
                r
                for r in table.rejected
                if (r.channel, r.sender_id) != (pending.channel, pending.sender_id)
            ]
            table.rejected.append(Rejected(pending.channel, pending.sender_id, pending.name, now))
            log.info("pairing rejected channel=%s sender_id=%s", pending.channel, pending.sender_id)

    def revoke(self, address: str) -> Approved:
        """Take back the approval of `CHANNEL:ID`."""
        channel, _, sender_id = address.strip().partition(":")
        if not channel or not sender_id:
            raise PairingError(f"{address!r}: expected CHANNEL:ID, e.g. telegram:123456")
        with self._changing() as table:
            found = next(
                (a for a in table.approved if (a.channel, a.sender_id) == (channel, sender_id)),
                None,
            )
            if found is None:
                raise PairingError(f"{channel}:{sender_id} is not an approved sender")
            table.approved.remove(found)
        log.info("pairing revoked channel=%s sender_id=%s", channel, sender_id)
        return found

    # -- the file ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _changing(self) -> Iterator[_Table]:
        """The table under the lock; written back (expired codes dropped) if the block succeeds
        and changed it, so a stranger writing again and again costs no write."""
        ensure_private_dir(self.path.parent)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            table = self._read()
            before = _dump(table)
            now = self._clock()
            table.pending = [p for p in table.pending if not p.expired(now)]
            table.rejected = [r for r in table.rejected if not r.expired(now)]
            yield table
            after = _dump(table)
            if after != before:
                atomic_write(self.path, after)
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self) -> _Table:
        try:
            raw = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return _Table([], [], [])
        except (OSError, ValueError, RecursionError) as exc:
            raise PairingError(f"{self.path}: cannot be read ({exc}); fix or remove it") from exc
        try:
            return _Table(
                pending=[
                    Pending(
                        str(p["channel"]),
                        str(p["code"]),
                        str(p["sender_id"]),
                        str(p.get("name", "")),
                        _epoch(p["created_at"]),
                        _epoch(p["replied_at"]),
                    )
                    for p in raw.get("pending", [])
                ],
                approved=[
                    Approved(
                        str(a["channel"]),
                        str(a["sender_id"]),
                        str(a.get("name", "")),
                        str(a["approved_by"]),
                        _epoch(a["approved_at"]),
                    )
                    for a in raw.get("approved", [])
                ],
                rejected=[
                    Rejected(
                        str(r["channel"]),
                        str(r["sender_id"]),
                        str(r.get("name", "")),
                        _epoch(r["rejected_at"]),
                    )
                    for r in raw.get("rejected", [])
                ],
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PairingError(
                f"{self.path}: not a pairing file ({type(exc).__name__}: {exc}); fix or remove it"
            ) from exc


def _dump(table: _Table) -> str:
    def shown(item: Pending | Approved | Rejected) -> dict[str, Any]:
        fields = asdict(item)
        for key in ("created_at", "replied_at", "approved_at", "rejected_at"):
            if key in fields:
                fields[key] = _iso(fields[key])
        return fields

    data = {
        "version": 1,
        "approved": [shown(a) for a in table.approved],
        "pending": [shown(p) for p in table.pending],
        "rejected": [shown(r) for r in table.rejected],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def stranger_reply(code: str, channel: str) -> str:
    """The one message a stranger gets: their code and how the owner approves it (the command
    as typed on `channel`)."""
    return (
        "I only answer people my owner has let in. Your pairing code is "
        f"{code} (valid for an hour). Ask the owner to approve it: "
        f"{typed_command(channel, f'/pair {code}')} in their chat with me, or "
        f"`memgate pairing approve {code}`."
    )


def pair_command(
    store: PairingStore, channel: str, sender_id: str, is_owner: bool, text: str
) -> str:
    """The answer to `/pair` (list pending codes) or `/pair CODE` (approve) sent in a DM."""
    if not is_owner:
        return "Only an owner of this bot (listed in allow_from) can approve pairing codes."
    argument = text.split(maxsplit=1)[1].strip() if len(text.split(maxsplit=1)) > 1 else ""
    try:
        if not argument:
            waiting = store.pending(channel)
            if not waiting:
                return "No pairing codes are waiting."
            lines = [f"{p.code}  {p.name or '?'} (id {p.sender_id})" for p in waiting]
            pair = typed_command(channel, "/pair CODE")
            return f"Waiting for approval (send {pair}):\n" + "\n".join(lines)
        approved = store.approve(argument, f"{channel}:{sender_id}", channel=channel)
    except (PairingError, OSError) as exc:  # OSError: the state folder refuses the write
        return f"Not approved: {exc}."
    who = approved.name or approved.sender_id
    return f"Approved {who} (id {approved.sender_id}): their next message will be answered."


def _pending_code(table: _Table, code: str, channel: str | None) -> Pending:
    """The waiting code `code` (of `channel` only, when given), or a PairingError saying so."""
    wanted = code.strip().upper()
    found = next(
        (p for p in table.pending if p.code == wanted and channel in (None, p.channel)), None
    )
    if found is None:
        raise PairingError(f"no pending pairing code {wanted} (expired, or never issued)")
    return found
