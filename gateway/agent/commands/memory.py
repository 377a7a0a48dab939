"""`/memory` and `/forget`: the owner looks at MEMORY.md, and has lines forgotten, from the chat.

Only the owner, in a private chat or the terminal, may use them: a group or a guest is refused.
`/forget TEXT` shows the lines of MEMORY.md and today's note that hold TEXT and waits for
`/forget yes` from the same chat (on Telegram, a button stands for each answer); the lines are then
removed through the memory writer, each file
only if it still holds what was shown (compare-and-write), MEMORY.md's previous text kept as a
version (`memgate memory restore` brings it back). The lines are recorded as forgotten
(memory/forgotten.py), so consolidation does not file them again from HISTORY.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from channels.base import parse_command
from gateway.bus import Button, InboundMessage, typed_command
from memory.errors import MemoryChangedError
from memory.fileio import create_exclusive
from memory.files import MemoryFiles
from memory.forgotten import ForgottenLines, normalise

log = logging.getLogger(__name__)

MEMORY_COMMANDS = frozenset({"memory", "forget"})
CONFIRM_WITHIN = 600.0  # seconds a shown /forget waits for its yes
SHOWN_LINES = 40  # lines of matches a reply lists; the rest are counted
YES, NO = frozenset({"yes", "y"}), frozenset({"no", "n", "cancel"})
# Under a listing: each the command typed (a platform without buttons shows those instead).
CHOICE = (Button("Forget them", "/forget yes"), Button("Keep them", "/forget no"))


@dataclass(frozen=True)
class Found:
    """The lines of one file that hold the text, by index, and the text they were found in."""

    path: Path
    label: str
    before: str
    indexes: tuple[int, ...]

    def lines(self) -> list[str]:
        all_lines = self.before.splitlines()
        return [all_lines[i] for i in self.indexes]

    def without(self) -> str:
        kept = [
            ln
            for i, ln in enumerate(self.before.splitlines(keepends=True))
            if i not in self.indexes
        ]
        return "".join(kept)


@dataclass(frozen=True)
class Pending:
    """A /forget shown and waiting for its yes."""

    query: str
    found: tuple[Found, ...]
    until: float


def matching(text: str, query: str) -> tuple[int, ...]:
    """Indexes of the lines of `text` holding `query` (case, spaces and punctuation aside); blank
    lines and headings never match, so the file keeps its shape."""
    plain, key = query.casefold().strip(), normalise(query)
    if not plain:
        return ()
    found = []
    for index, line in enumerate(text.splitlines()):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if plain in line.casefold() or (key and f" {key} " in f" {normalise(line)} "):
            found.append(index)
    return tuple(found)


class MemoryCommands:
    """Answers /memory and /forget; holds each chat's /forget waiting for its yes."""

    def __init__(
        self,
        files: MemoryFiles,
        forgotten: ForgottenLines,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self.forgotten = forgotten
        self.clock = clock
        self._pending: dict[str, Pending] = {}

    async def answer(self, name: str, args: str, message: InboundMessage) -> str:
        """The reply to `/name args` in the chat of `message`."""
        channel = message.channel
        if message.is_group or not message.sender_is_owner:
            memory, forget = typed_command(channel, "/memory"), typed_command(channel, "/forget")
            return f"Only the owner can use {memory} and {forget}, in a private chat with me."
        if name == "memory":
            return await asyncio.to_thread(self._show, args.strip())
        word = args.strip().casefold()
        if word in YES:
            return await asyncio.to_thread(self._confirm, message.key, channel)
        if word in NO:
            return (
                "Nothing forgotten." if self._pending.pop(message.key, None) else "Nothing waits."
            )
        if not word:
            forget = typed_command(channel, "/forget TEXT")
            yes = typed_command(channel, "/forget yes")
            return f"Send {forget}: I show the lines of memory that hold it, then {yes}."
        return await asyncio.to_thread(self._find, args.strip(), message.key)

    def buttons(self, message: InboundMessage) -> tuple[Button, ...]:
        """The choices under the reply to `message`: Forget and Keep when it was the owner's
        `/forget TEXT` that left lines waiting for their yes, else none."""
        command = parse_command(message.text)
        if command is None or command.name != "forget" or message.is_group:
            return ()
        pending = self._pending.get(message.key)
        if not message.sender_is_owner or pending is None:
            return ()
        return CHOICE if pending.query == command.args.strip() else ()

    # -- /memory -----------------------------------------------------------------------------------
    def _show(self, query: str) -> str:
        text = self.files.read_memory()
        if not query:
            return text if text.strip() else "MEMORY.md is empty."
        lines = [text.splitlines()[i] for i in matching(text, query)]
        if not lines:
            return f"No line of MEMORY.md holds {query!r}."
        return f"Lines of MEMORY.md holding {query!r}:\n" + _listed(lines)

    # -- /forget TEXT, then /forget yes ------------------------------------------------------------
    def _find(self, query: str, key: str) -> str:
        found = []
        memory = self.files.read_memory()
        if indexes := matching(memory, query):
            found.append(Found(self.files.memory_md, "MEMORY.md", memory, indexes))
        note_path = self.files.daily_note_path()
        note = self.files.read_daily_note()
        if indexes := matching(note, query):
            found.append(Found(note_path, f"today's note ({note_path.name})", note, indexes))
        if not found:
            self._pending.pop(key, None)
            return f"No line of MEMORY.md or today's note holds {query!r}; nothing to forget."
        self._pending[key] = Pending(query, tuple(found), self.clock() + CONFIRM_WITHIN)
        shown = [f"{f.label}:\n{_listed(f.lines())}" for f in found]
        count = sum(len(f.indexes) for f in found)
        return (
            f"{count} line{'s' if count != 1 else ''} hold {query!r}:\n\n"
            + "\n\n".join(shown)
            + "\n\nForget them? The current text is kept as a version, which `memgate memory "
            "restore` brings back."
        )

    def _confirm(self, key: str, channel: str) -> str:
        pending = self._pending.pop(key, None)
        if pending is None or self.clock() > pending.until:
            forget = typed_command(channel, "/forget TEXT")
            return f"Nothing waits to be forgotten here: send {forget} first."
        done: list[str] = []
        undo = ""
        removed = 0
        for found in pending.found:
            try:
                kept = self._remove(found)
            except MemoryChangedError:
                return (
                    f"{found.label} changed since I showed the lines (memgate may have added "
                    f"facts); nothing more was removed. Send "
                    f"{typed_command(channel, '/forget ' + pending.query)} again."
                )
            self.forgotten.add(found.lines())
            removed += len(found.indexes)
            done.append(f"{found.label}: previous text kept as memory/versions/{kept.name}")
            if found.path == self.files.memory_md:
                undo = f"memgate memory restore {kept.name}"
        log.info("memory lines forgotten lines=%d files=%d", removed, len(pending.found))
        how = (
            f"To undo: `{undo}` on the machine running memgate."
            if undo
            else "To undo, copy the kept text back over today's note."
        )
        return (
            f"Forgotten: {removed} line{'s' if removed != 1 else ''} removed "
            f"({'; '.join(done)}). Consolidation will not write them back.\n{how}"
        )

    def _remove(self, found: Found) -> Path:
        """Write `found`'s file without its lines, if it still holds what was shown; return
        where its previous text is kept."""
        if found.path == self.files.memory_md:
            version = self.files.write_memory(found.without(), expected=found.before)
            if version is None:  # nothing changed: no line was in fact removed
                raise MemoryChangedError("MEMORY.md already lacks those lines")
            return version
        # A daily note has no versions of its own: its previous text is kept beside MEMORY.md's,
        # before the note is rewritten.
        stamp = datetime.now(self.files.tz).strftime("%Y%m%dT%H%M%S%f")
        copy = self.files.versions / f"{found.path.stem}.{stamp}.md"
        create_exclusive(copy, found.before)
        self.files.write_file(found.path, found.without(), expected=found.before)
        return copy


def _listed(lines: list[str]) -> str:
    shown = [line.strip() for line in lines[:SHOWN_LINES]]
    more = len(lines) - len(shown)
    return "\n".join(shown) + (f"\n(and {more} more)" if more > 0 else "")
