"""A channel's inbox: a write-ahead journal of received messages, so that a process killed between
receiving a message and answering it loses nothing (Telegram's updates, Discord's messages).

It imports no chat SDK, and of ours only memory.fileio and gateway.bus.

The file holds one JSON object per line, each appended with a single `os.write` on an O_APPEND
descriptor: `{"update": {...}}` when an entry arrives (a JSON object whose `id_field` is an integer
that grows with arrival, such as Telegram's update_id or a Discord snowflake; the channels journal
only what admission let in), `{"done": id}` once it has been handled or needs no answer, and
`{"sent": id, "parts": n}` once the first n parts of a long answer to it are out (a replay then
sends only the rest), and `{"shown": id, "messages": [...]}` with the platform's ids of the
messages a reply shown while it is written (channels/live.py) put in the chat, each time one
is added (a replay then finishes the answer in them rather than beside them). Arrivals are fsynced by group commit: the
first `append` of an event-loop iteration schedules one fsync at the end of that iteration,
covering every line written in it (outside a loop, each append is synced at once). Done and sent
and shown lines are not synced (a kill leaves a written line; only a power cut can lose one):
losing one costs a replay (or a part, or a live reply's message, sent again), which the agent
recognises. At start `open()` returns the entries without a done line, oldest first, and rewrites
the file with only those (and the sent lines that belong to them).

Nothing is ever dropped for having been replayed often: under load, or while something else
makes the service crash and restart, a message may wait through many starts. A message that
itself kills the process would come back at every start; its line can be deleted by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gateway.bus import OutboundMessage
from memory.fileio import FILE_MODE, atomic_write, ensure_private_dir

log = logging.getLogger(__name__)

Json = dict[str, Any]
Send = Callable[[OutboundMessage], Awaitable[object]]
TRUNCATE_AT = 1 << 20  # bytes: a journal this large is emptied whenever nothing is pending
# Each channel's journal in the state folder, `<channel>-<bot id>-inbox.jsonl`, and the field
# of an entry that holds its growing id.
JOURNAL_SUFFIX = "-inbox.jsonl"
ID_FIELDS = {"telegram": "update_id", "discord": "message_id", "matrix": "seq", "slack": "seq"}


def waiting(state_dir: Path) -> dict[str, int]:
    """Per channel, the received messages not yet finished in its journals: answered at the next
    start (or now, by a running service). Blocking."""
    counts: dict[str, int] = {}
    for path in sorted(state_dir.glob(f"*{JOURNAL_SUFFIX}")):
        channel = path.name.partition("-")[0]
        if channel in ID_FIELDS:
            inbox = Inbox(path, id_field=ID_FIELDS[channel], label=channel)
            counts[channel] = counts.get(channel, 0) + inbox.peek()
    return counts


class Inbox:
    """The journal of one bot's entries: `open()` once, then `append` and `finish` each entry."""

    def __init__(self, path: Path, *, id_field: str = "update_id", label: str = "telegram") -> None:
        self.path = Path(path)
        self.id_field = id_field
        self.label = label  # names the channel in log lines
        self._fd: int | None = None
        self._pending: set[int] = set()
        self._parts: dict[int, int] = {}  # parts of an answer out, by pending entry
        # The live reply's messages in the chat, by pending entry. Kept here rather than in the
        # session: only the channel knows the platform's message ids, and this file is the
        # channel's alone, so it keeps one writer (the session file is the agent's).
        self._shown: dict[int, list[int]] = {}
        self._size = 0
        self._torn = False  # the last write was cut short: the next line starts on a new one
        self._sync_scheduled = False
        self.syncs = 0  # fsyncs done, for the benchmark's figure

    def open(self) -> list[Json]:
        """Read the journal, compact it to the unfinished updates and open it for appending.

        Returns those updates in update_id order. Blocking: call it from a thread.
        """
        if self._fd is not None:
            raise RuntimeError("Inbox.open() was already called")
        entries, parts, shown = self._read()
        kept = [update for _, update in sorted(entries.items())]
        self._parts = {key: count for key, count in parts.items() if key in entries}
        self._shown = {key: ids for key, ids in shown.items() if key in entries}
        ensure_private_dir(self.path.parent)
        self._rewrite(kept)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        self._size = os.fstat(self._fd).st_size
        self._pending = {int(update[self.id_field]) for update in kept}
        return kept

    def open_or_log(self) -> list[Json]:
        """`open()`, or no entries and an error logged when the file cannot be opened: serving
        without the journal beats not serving (a kill may then lose the messages in flight)."""
        try:
            return self.open()
        except OSError as exc:
            log.error("%s inbox unavailable path=%s error=%s", self.label, self.path, exc)
            return []

    def peek(self) -> int:
        """How many entries wait unfinished, read without opening or compacting the journal (for
        `memgate status`, beside a running service). Blocking."""
        entries, _, _ = self._read()
        return len(entries)

    def close(self) -> None:
        if self._fd is not None:
            self.sync()
            os.close(self._fd)
            self._fd = None

    def holds(self, update_id: int) -> bool:
        """Whether the update was received and is not finished yet."""
        return update_id in self._pending

    def append(self, update: Json) -> None:
        """Journal a received update, before anything acts on it."""
        self._pending.add(int(update[self.id_field]))
        self._write({"update": update})
        self._schedule_sync()

    def _schedule_sync(self) -> None:
        if self._sync_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.sync()
            return
        self._sync_scheduled = True
        loop.call_soon(self.sync)

    def sync(self) -> None:
        """Flush the lines written so far to the disk (one fsync for all of them)."""
        self._sync_scheduled = False
        if self._fd is None:
            return
        try:
            os.fsync(self._fd)
            self.syncs += 1
        except OSError as exc:
            log.warning("%s inbox could not sync path=%s error=%s", self.label, self.path, exc)

    def parts_sent(self, update_id: int) -> int:
        """How many parts of the answer to this update went out before a restart."""
        return self._parts.get(update_id, 0)

    def part_sent(self, update_id: int, parts: int) -> None:
        """The first `parts` parts of the answer to this update are out (taken, or refused for
        good): a replay sends the others only. Written, not synced, as a done line."""
        if update_id in self._pending:
            self._parts[update_id] = parts
            self._write({"sent": update_id, "parts": parts})

    def live_messages(self, update_id: int) -> list[int]:
        """The ids of the messages a live reply to this update had put in the chat before a
        restart, in order (the first answers the person's message)."""
        return list(self._shown.get(update_id, ()))

    def record_live(self, update_id: int, messages: list[int]) -> None:
        """The live reply to this update now shows in `messages` (all of them, in order).
        Written, not synced, as a done line."""
        if update_id in self._pending and messages != self._shown.get(update_id):
            self._shown[update_id] = list(messages)
            self._write({"shown": update_id, "messages": list(messages)})

    def finish(self, update_id: int) -> None:
        """The update needs no replay: handled, refused or ignored. Repeats are no-ops."""
        if update_id not in self._pending:
            return
        self._pending.discard(update_id)
        self._parts.pop(update_id, None)
        self._shown.pop(update_id, None)
        self._write({"done": update_id})
        if not self._pending and self._size > TRUNCATE_AT and self._fd is not None:
            # Nothing in it is needed any more; with O_APPEND the next line starts at 0.
            try:
                os.ftruncate(self._fd, 0)
                self._size = 0
            except OSError as exc:
                log.warning(
                    "%s inbox could not truncate path=%s error=%s", self.label, self.path, exc
                )

    # -- the file ---------------------------------------------------------------------------------
    def _write(self, record: Json) -> None:
        if self._fd is None:
            return
        # ensure_ascii keeps the file ASCII, lone surrogates included (as \ud800 escapes).
        line = json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"
        if self._torn:
            line = b"\n" + line
        try:
            written = os.write(self._fd, line)
        except OSError as exc:
            log.warning("%s inbox could not write path=%s error=%s", self.label, self.path, exc)
            return
        self._size += written
        self._torn = written < len(line)
        if self._torn:
            log.warning("%s inbox write cut short path=%s", self.label, self.path)

    def _read(self) -> tuple[dict[int, Json], dict[int, int], dict[int, list[int]]]:
        """The unfinished updates by id, the parts of an answer out by id, and the messages of
        a live reply by id."""
        entries: dict[int, Json] = {}
        parts: dict[int, int] = {}
        shown: dict[int, list[int]] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return entries, parts, shown
        for number, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if "done" in record:
                    entries.pop(int(record["done"]), None)
                elif "sent" in record:
                    parts[int(record["sent"])] = int(record["parts"])
                elif "shown" in record:
                    shown[int(record["shown"])] = [int(i) for i in record["messages"]]
                else:
                    update = record["update"]
                    entries[int(update[self.id_field])] = update
            except (ValueError, KeyError, TypeError, RecursionError):
                # A line torn by a kill or a full disk: what it held is lost, the rest is not.
                log.warning(
                    "%s inbox skipping an unreadable line path=%s line=%d",
                    self.label,
                    self.path,
                    number,
                )
        return entries, parts, shown

    def _rewrite(self, kept: list[Json]) -> None:
        if not kept:
            # Nothing to keep, so a kill halfway through loses nothing either.
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.path, 0)
            return
        records: list[Json] = [{"update": update} for update in kept]
        records += [{"sent": key, "parts": count} for key, count in self._parts.items()]
        records += [{"shown": key, "messages": ids} for key, ids in self._shown.items()]
        lines = [json.dumps(record, separators=(",", ":")) + "\n" for record in records]
        atomic_write(self.path, "".join(lines))


async def settle(reply: OutboundMessage | None, finish: Callable[[], None], send: Send) -> None:
    """Send a turn's reply and finish its inbox entry, in the order that neither loses a message
    nor repeats a command after a kill.

    A reply with nothing stored to send again (a command's answer, an apology) finishes the entry
    before the send, so a replay never runs a command such as /new twice. Otherwise the entry is
    finished at once when the reply is out (a kill keeps a written line), then the reply is marked
    delivered: a kill before the finish replays the message, and the agent sends the stored answer
    again unless it was marked delivered.
    """
    if reply is None or reply.on_sent is None:
        finish()
    if reply is not None:
        await send(reply)
    finish()
    if reply is not None:
        await reply.sent()
