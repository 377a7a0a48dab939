"""The session store: one append-only JSONL file per conversation (its format: session_file).

A turn appends lines; consolidation appends a marker; nothing rewrites a file in place. Each append
is one write and one fsync, whatever the number of lines. A torn last line is dropped on load and
cut off before the next append. A session is loaded from the first message a turn can use, found
through a small index beside the file (session_index), so its cost does not grow with what is
already consolidated. Sessions are cached with a bound; a session still referenced by a running
turn or job is never loaded twice. Also here: the history window the model sees, and where a
stored turn stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any, Protocol

from memory.sessions.commit import GroupCommit
from memory.sessions.file import (
    SUFFIX,
    Loaded,
    Message,
    encode_record,
    file_name,
    key_from_file_name,
    move_to_archive,
    read_session,
)
from memory.sessions.index import (
    KEEP_RECENT,
    base_for,
    build_index,
    drop_index,
    file_ends,
    load_session,
    owed_among,
    save_index,
)
from memory.sessions.message_log import MessageLog

log = logging.getLogger(__name__)


# Fields of a stored message that the model sees; the rest (timestamp, sender) are ours.
_WIRE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")


class Counter(Protocol):
    """What the store needs from a tokenizer."""

    def count_message(self, message: Message) -> int: ...


class Bounder(Protocol):
    """What a session's bound cache needs from a tokenizer."""

    def at_most_message(self, message: Message) -> int: ...


class Session:
    """One conversation: its messages from `messages.base` on in memory, mirrored by its file."""

    def __init__(self, key: str, path: Path, loaded: Loaded) -> None:
        self.key = key
        self.path = path
        self.messages = MessageLog(loaded.base, loaded.messages)
        self.earlier_owed = loaded.earlier_owed  # owed answers before the loaded part
        self.last_consolidated = loaded.last_consolidated
        self.created_at = loaded.created_at
        self.group = loaded.group  # a group chat: its memory stays out of MEMORY.md
        self.delivered = loaded.delivered  # ids of stored answers the platform took
        self.lock = asyncio.Lock()  # serializes appends to the file
        self.consolidating = asyncio.Lock()  # one consolidation job at a time, live or archived
        self._size = loaded.good_size
        self._torn = loaded.torn
        self._offsets = loaded.offsets  # byte offset of each loaded message's line
        self._tokens: list[int | None] = [None] * len(loaded.messages)
        self._bounds: list[int | None] = [None] * len(loaded.messages)

    @property
    def unconsolidated(self) -> int:
        return len(self.messages) - self.last_consolidated

    def tokens(self, index: int, counter: Counter) -> int:
        """Token count of message `index`, computed once."""
        return self._once(self._tokens, index, counter.count_message)

    def bound(self, index: int, counter: Bounder) -> int:
        """Upper bound of message `index`'s token count (`counter.at_most_message`), computed
        once: every turn's history window and consolidation check add these up again."""
        return self._once(self._bounds, index, counter.at_most_message)

    def _once(self, cache: list[int | None], index: int, measure: Callable[[Message], int]) -> int:
        slot = index - self.messages.base if index >= 0 else index
        cached = cache[slot]
        if cached is None:
            cached = cache[slot] = measure(self.messages[index])
        return cached

    def tokens_between(self, start: int, end: int, counter: Counter) -> int:
        return sum(self.tokens(i, counter) for i in range(start, end))

    def owed(self) -> list[Message]:
        """Stored answers never marked delivered, oldest first."""
        return owed_replies([*self.earlier_owed, *self.messages], self.delivered)

    def _appended(self, records: list[Message], offsets: list[int], size: int) -> None:
        for record, offset in zip(records, offsets, strict=True):
            if record.get("_type") == "consolidated":
                self.last_consolidated = record["last_consolidated"]
            elif record.get("_type") == "delivered":
                self.delivered.add(record["reply_id"])
            elif record.get("_type") != "metadata":
                self.messages.append(record)
                self._offsets.append(offset)
                self._tokens.append(None)
                self._bounds.append(None)
        self._size = size
        self._torn = False

    def _index_state(self, keep: int) -> Loaded:
        """This session as the index of its file should describe it now."""
        base = max(self.messages.base, base_for(self.last_consolidated, len(self.messages), keep))
        cut = base - self.messages.base
        loaded = self.messages.loaded
        return Loaded(
            loaded[cut:],
            self.last_consolidated,
            self.created_at,
            self.group,
            self._size,
            False,
            self.key,
            self.delivered,
            base,
            self._offsets[cut:],
            self.last_consolidated,
            owed_among([*self.earlier_owed, *loaded[:cut]], self.delivered),
        )


# Messages the cache of recent sessions holds over all of them: each busy chat loads its last
# KEEP_RECENT at least, so a count of sessions alone let a year of busy chats hold 50 MB.
CACHE_MESSAGES = 20_000


class SessionStore:
    """Loads, caches and appends to sessions under `WORKSPACE/sessions/`."""

    def __init__(
        self,
        root: Path,
        tz: tzinfo,
        cache_size: int = 256,
        keep_recent: int = KEEP_RECENT,
        cache_messages: int = CACHE_MESSAGES,
        on_write: Callable[[Path], None] | None = None,
    ) -> None:
        self.root = root
        self.keep_recent = keep_recent  # messages loaded before the end, whatever the pointer
        self.archive = root / "archive"
        self.tz = tz
        self.cache_size = cache_size
        self.cache_messages = cache_messages
        self._recent: OrderedDict[str, Session] = OrderedDict()
        # Sessions still referenced elsewhere (a running turn or job) stay findable after eviction.
        self._live: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._loading: dict[str, asyncio.Future[Session]] = {}
        # Sessions moved to the archive by /new that a job may still be working on.
        self._archived: weakref.WeakValueDictionary[Path, Session] = weakref.WeakValueDictionary()
        self.commits = GroupCommit()  # appends of one loop iteration share a thread hop
        # Told each file written, once its bytes are in it (memory search re-reads those).
        self._on_write = on_write or (lambda path: None)

    def now(self) -> str:
        return datetime.now(self.tz).isoformat(timespec="seconds")

    def path_for(self, key: str) -> Path:
        return self.root / file_name(key)

    async def get(self, key: str) -> Session:
        """The session for `key`, loaded from its file on first use (off the event loop)."""
        session = self._recent.get(key) or self._live.get(key)
        if session is None:
            pending = self._loading.get(key)
            if pending is not None:
                return await asyncio.shield(pending)
            future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
            self._loading[key] = future
            try:
                path = self.path_for(key)
                loaded = await asyncio.to_thread(load_session, path, self.keep_recent)
                session = Session(key, path, loaded)
                self._live[key] = session
                future.set_result(session)
            except BaseException as exc:
                future.set_exception(exc)
                future.exception()  # mark retrieved: the caller below raises it
                raise
            finally:
                del self._loading[key]
        self._remember(session)
        return session

    def _remember(self, session: Session) -> None:
        """Keep `session` as the most recent; drop the least recent past either bound."""
        self._recent[session.key] = session
        self._recent.move_to_end(session.key)
        held = sum(len(s.messages.loaded) for s in self._recent.values())
        while len(self._recent) > 1 and (
            len(self._recent) > self.cache_size or held > self.cache_messages
        ):
            _, dropped = self._recent.popitem(last=False)
            held -= len(dropped.messages.loaded)

    def cached(self) -> Iterator[Session]:
        return iter(list(self._recent.values()))

    async def append(
        self, session: Session, records: list[Message], *, synced: bool = True
    ) -> None:
        """Append records (messages or markers) as whole lines; write metadata first if new.

        Returns once they are on disk, or with `synced=False` once they are written (they survive
        a killed process; the next synced append of the session puts them on disk too)."""
        if not records:
            return
        async with session.lock:
            lines = []
            if session._size == 0:
                # To the microsecond: it tells this session's HISTORY.md entry ids from those of
                # the one /new archived (memory/consolidation/entries.py), which may have begun the same second.
                session.created_at = session.created_at or datetime.now(self.tz).isoformat(
                    timespec="microseconds"
                )
                meta = {
                    "_type": "metadata",
                    "key": session.key,
                    "created_at": session.created_at,
                    "version": 1,
                }
                if session.group:
                    meta["group"] = True
                lines.append(encode_record(meta))
            lines.extend(encode_record(r) for r in records)
            cut = session._size if session._torn else None
            data = b"".join(lines)
            pending = self.commits.submit(session.path, data, cut, synced=synced)
            try:
                size = await asyncio.shield(pending)
            except asyncio.CancelledError:
                # The lines are being written whatever happens to this turn: keep the session
                # in step with its file before passing the cancellation on.
                with contextlib.suppress(Exception):
                    self._settle(session, records, lines, await pending)
                raise
            finally:
                self._on_write(session.path)
            self._settle(session, records, lines, size)

    @staticmethod
    def _settle(session: Session, records: list[Message], lines: list[bytes], size: int) -> None:
        """Record appended `records` (the last of `lines`, ending at `size`) in the session."""
        offsets, at = [], size - sum(len(line) for line in lines)
        for line in lines:
            offsets.append(at)
            at += len(line)
        offsets = offsets[len(lines) - len(records) :]  # past the metadata line, if any
        session._appended(records, offsets, size)

    async def add_messages(
        self, session: Session, messages: list[Message], *, synced: bool = True
    ) -> None:
        """Append messages, stamping each with the current time (see `append` for `synced`)."""
        stamped = [{**m, "timestamp": m.get("timestamp") or self.now()} for m in messages]
        await self.append(session, stamped, synced=synced)

    async def mark_consolidated(self, session: Session, pointer: int) -> None:
        """Move the consolidation pointer by appending a marker."""
        if not session.messages.base <= pointer <= len(session.messages):
            raise ValueError(
                f"pointer {pointer} outside {session.messages.base}..{len(session.messages)}"
            )
        marker = {"_type": "consolidated", "last_consolidated": pointer, "timestamp": self.now()}
        await self.append(session, [marker])
        async with session.lock:
            state = session._index_state(self.keep_recent)
            path = session.path
        # An archived file is read whole; a session loaded from its start needs no index. Written
        # outside the lock: any index of a prefix of the file stays true while the file grows.
        if path.parent == self.root and state.base:
            await asyncio.to_thread(_reindex, path, state)

    async def mark_delivered(self, session: Session, reply_id: str) -> None:
        """Record that the stored answer `reply_id` reached its chat: it is no longer owed."""
        if reply_id in session.delivered:
            return
        await self.append(
            session, [{"_type": "delivered", "reply_id": reply_id, "timestamp": self.now()}]
        )

    async def rotate(self, key: str) -> Path | None:
        """Move the session's file to `archive/` and forget it; return the archived path."""
        session = await self.get(key)
        async with session.lock:
            if not session.path.exists():
                # Nothing to archive, and the object stays the key's one: a writer already
                # holding it and a later `get` must append to one file through one object.
                return None
            self._recent.pop(key, None)
            self._live.pop(key, None)
            stamp = datetime.now(self.tz).strftime("%Y%m%dT%H%M%S")
            stem = file_name(key)[: -len(SUFFIX)]
            target = await asyncio.to_thread(
                move_to_archive, session.path, self.archive, stem, stamp
            )
            self._on_write(session.path)
            self._on_write(target)
            await asyncio.to_thread(drop_index, self.root / file_name(key))
            # Anyone still holding the old object (a running consolidation) now appends to the
            # archived file, and archival finds the same object, so the two never overlap.
            session.path = target
            self._archived[target] = session
            return target

    async def open_archived(self, path: Path) -> Session:
        """A session in `archive/`; the same object a job may still hold if it was just rotated."""
        session = self._archived.get(path)
        if session is None:
            loaded = await asyncio.to_thread(read_session, path)
            stem = path.name[: -len(SUFFIX)].rsplit(".", 1)[0]  # drop the rotation stamp
            session = Session(loaded.key or key_from_file_name(stem + SUFFIX), path, loaded)
            self._archived[path] = session
        return session

    async def archive_pending(self, path: Path) -> bool:
        """Whether the archived file at `path` holds messages past its consolidation pointer, read
        from the pointer on through an index beside it (written by the first read): a finished
        archive costs a few small reads, not its length. Archives only: that index starts at the
        pointer, where a live session's must start KEEP_RECENT messages before the end."""
        loaded = await asyncio.to_thread(load_session, path, 0)
        return loaded.last_consolidated < loaded.base + len(loaded.messages)

    def archived_paths(self) -> list[Path]:
        if not self.archive.is_dir():
            return []
        return sorted(p for p in self.archive.iterdir() if p.name.endswith(SUFFIX))

    def keys(self) -> list[str]:
        """Keys of every live session file on disk."""
        if not self.root.is_dir():
            return []
        keys = []
        for entry in sorted(self.root.iterdir()):
            if entry.is_file() and entry.name.endswith(SUFFIX):
                try:
                    keys.append(key_from_file_name(entry.name))
                except ValueError:
                    continue
        return keys


def _reindex(path: Path, state: Loaded) -> None:
    """Write the index of `path` for `state` (after the pointer moved)."""
    try:
        head, tail = file_ends(path, state.good_size)
    except OSError as exc:
        log.warning("session index not written file=%s error=%s", path, exc)
        return
    save_index(path, build_index(state, head, tail))


def history_window(
    session: Session,
    counter: Counter,
    available: int,
    max_messages: int = 0,
    end: int | None = None,
) -> list[Message]:
    """The unconsolidated messages before `end` the model may see, newest first to fill `available`.

    The window starts at a user message, carries no tool result without its call and no tool call
    without its results, and holds at most `max_messages` (0: no cap). The file keeps everything.
    """
    end = len(session.messages) if end is None else end
    start = window_start(session, end, max_messages)
    index, used = end, 0
    while index > start:
        cost = session.tokens(index - 1, counter)
        if used + cost > available:
            break
        used += cost
        index -= 1
    return legal_messages(session.messages[index:end])


def window_start(session: Session, end: int, max_messages: int = 0) -> int:
    """The oldest message a history window ending at `end` may hold (0 `max_messages`: no cap)."""
    start = session.last_consolidated
    return max(start, end - max_messages) if max_messages else start


def legal_messages(messages: list[Message]) -> list[Message]:
    """Wire-shaped messages, from the first user message on, with tool calls and results paired."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    if first_user is None:
        return []
    window = messages[first_user:]
    answered = {m.get("tool_call_id") for m in window if m.get("role") == "tool"}
    called: set[str] = set()
    result: list[Message] = []
    for message in window:
        wire = {k: message[k] for k in _WIRE_FIELDS if k in message}
        role = wire.get("role")
        if role == "assistant" and wire.get("tool_calls"):
            calls = [c for c in wire["tool_calls"] if c.get("id") in answered]
            called.update(c.get("id") for c in calls)
            if calls:
                wire["tool_calls"] = calls
            else:
                del wire["tool_calls"]
                if not wire.get("content"):
                    continue
        elif role == "tool" and wire.get("tool_call_id") not in called:
            continue
        result.append(wire)
    return result


# -- where a turn stands (the outbox and resumption read a session through these) -----------------
INTERRUPTED_TOOL = (
    "The tool was interrupted by a restart before it finished, and was not run again."
)


def turn_after(
    messages: Sequence[Message], index: int
) -> tuple[list[Message], Message | None, bool]:
    """What follows the user message at `index`: its stored tool steps, its final answer (or None),
    and whether a later user message follows (the turn was left behind, never to be resumed)."""
    steps: list[Message] = []
    for message in messages[index + 1 :]:
        role = message.get("role")
        if role == "user":
            return steps, None, True
        if role == "assistant" and not message.get("tool_calls"):
            return steps, message, False
        steps.append(message)
    return steps, None, False


def unanswered_calls(steps: list[Message]) -> list[dict[str, Any]]:
    """Tool calls among `steps` that have no stored result (the kill came during the tool)."""
    answered = {m.get("tool_call_id") for m in steps if m.get("role") == "tool"}
    return [
        call
        for message in steps
        for call in message.get("tool_calls") or []
        if call.get("id") not in answered
    ]


def owed_replies(messages: Iterable[Message], delivered: set[str]) -> list[Message]:
    """Stored answers recorded as owed (they carry a reply id) and never marked delivered."""
    return owed_among(messages, delivered)


def interrupted_turn(messages: Sequence[Message]) -> bool:
    """True when the session ends in stored tool steps: a turn a restart stopped half-way."""
    return bool(messages) and (
        messages[-1].get("role") == "tool" or bool(messages[-1].get("tool_calls"))
    )
