"""What consolidation writes: a chunk as dated lines, its HISTORY.md entry and the MEMORY.md merge.

Lines read `[YYYY-MM-DD HH:MM] ROLE: content` in the configured time zone. Every write goes through
`MemoryFiles`, the one writer: HISTORY.md entries carry an id naming their chunk (so a retry never
appends one twice) and MEMORY.md is written only if it still holds the text the model merged into
(a merge that raced another write is asked again). The session's marker is written last.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from datetime import datetime, tzinfo

from memory.budget import TOOL_RESULT_CHARS
from memory.consolidation.dedupe import UpdateCurator
from memory.consolidation.recall import mask_recalls
from memory.consolidation.summariser import Summariser
from memory.errors import MemoryChangedError, UpdateRefusedError
from memory.files import MemoryFiles
from memory.sessions.file import Message
from memory.sessions.store import Session, SessionStore

log = logging.getLogger(__name__)

RAW_CAP = 8_000  # characters of a [RAW] entry's lines
_STAMP = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")
MERGE_ATTEMPTS = 5  # merges asked again in a row when MEMORY.md keeps changing under a call
_SHRINK_WARN_ABOVE = 1000  # characters of MEMORY.md above which a shrink by half is warned about


class Transcript:
    """Renders messages as dated lines in `tz`."""

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz

    def when(self, message: Message) -> datetime:
        raw = message.get("timestamp")
        try:
            return datetime.fromisoformat(raw).astimezone(self.tz) if raw else datetime.now(self.tz)
        except (TypeError, ValueError):
            return datetime.now(self.tz)

    def stamp(self, chunk: list[Message]) -> str:
        """The chunk's last timestamp as `[YYYY-MM-DD HH:MM]`."""
        return self.when(chunk[-1]).strftime("[%Y-%m-%d %H:%M]")

    def stamped(self, entry: str, chunk: list[Message]) -> str:
        """`entry`, with the chunk's stamp put in front unless it starts with one."""
        entry = entry.strip()
        return entry if _STAMP.match(entry) else f"{self.stamp(chunk)} {entry}"

    def line(self, message: Message, shorten: bool = True, cap: int | None = None) -> str:
        """One message as a line; tool results cut to TOOL_RESULT_CHARS when `shorten`, and any
        line to at most `cap` bytes of UTF-8 (its start and end kept, the cut named)."""
        role = str(message.get("role", "?")).upper()
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if message.get("tool_calls"):
            names = ", ".join(c.get("function", {}).get("name", "?") for c in message["tool_calls"])
            text = f"{text} [called {names}]".strip()
        if role == "TOOL" and shorten and len(text) > TOOL_RESULT_CHARS:
            text = text[:TOOL_RESULT_CHARS] + " [...]"
        head = f"{self.when(message).strftime('[%Y-%m-%d %H:%M]')} {role}: "
        if cap is not None:
            text = _within_bytes(text, cap - len(head.encode()))
        return head + text

    def raw_entry(self, chunk: list[Message]) -> str:
        """The chunk verbatim (lines capped at RAW_CAP characters) as a `[RAW]` HISTORY.md entry."""
        body = "\n".join(self.line(m, shorten=False) for m in chunk)
        if len(body) > RAW_CAP:
            body = body[:RAW_CAP] + f"\n[... {len(body) - RAW_CAP} characters truncated]"
        return f"{self.stamp(chunk)} [RAW] {len(chunk)} messages\n{body}"


def _within_bytes(text: str, room: int) -> str:
    """`text` if its UTF-8 fits `room` bytes; else its first two thirds and last third of that
    room around a note of how much was cut (a message bigger than a whole consolidation call
    can hold: the session file keeps it whole)."""
    data = text.encode()
    if len(data) <= room:
        return text
    note = f" [... {len(data)} bytes, too long for one consolidation call: cut here ...] "
    keep = max(0, room - len(note.encode()))
    start = data[: keep * 2 // 3].decode(errors="ignore")
    end = data[len(data) - (keep - keep * 2 // 3) :].decode(errors="ignore") if keep else ""
    return start + note + end


class ChunkWriter:
    """Writes one chunk's consolidation: HISTORY.md, then MEMORY.md, then the session marker."""

    def __init__(
        self,
        sessions: SessionStore,
        files: MemoryFiles,
        summariser: Summariser,
        transcript: Transcript,
        curator: UpdateCurator | None = None,
    ) -> None:
        self.sessions = sessions
        self.files = files
        self.summariser = summariser
        self.transcript = transcript
        self.curator = curator or UpdateCurator()
        # Why a chunk's last memory_update was refused, by chunk id: its retry tells the model.
        self._refused: dict[str, str] = {}

    async def commit(
        self,
        session: Session,
        chunk: list[Message],
        stop: int,
        ident: str,
        with_memory: bool,
        line_cap: int | None = None,
    ) -> None:
        """Ask the model, then write HISTORY.md, MEMORY.md and the marker, in that order.

        HISTORY.md is tagged with `ident`, so a retry after a failure further on does not append
        the entry twice. MEMORY.md is written only if it still holds the text the model merged
        into; if it changed meanwhile, the merge is asked again against the new text. Each line
        is cut to `line_cap` bytes, as the chunk was planned, and recalls of memory are shown as
        markers (memory/consolidation/recall.py). The update is curated before anything is
        written (memory/consolidation/dedupe.py): one it refuses writes nothing.
        """
        lines = [self.transcript.line(m, cap=line_cap) for m in mask_recalls(chunk)]
        for _ in range(MERGE_ATTEMPTS):
            before = await self.files.aread_memory() if with_memory else ""
            note = self._refused.get(ident, "")
            history_entry, memory_update = await self.summariser.ask(
                lines, before, with_memory, note
            )
            if with_memory:
                try:
                    memory_update = await asyncio.to_thread(
                        self.curator.curate, before, memory_update
                    )
                except UpdateRefusedError as exc:
                    self._refused[ident] = str(exc)
                    raise
            entry = self.transcript.stamped(history_entry, chunk)
            await self.files.aappend_history(entry, entry_id=ident)
            if not with_memory:
                break
            try:
                await asyncio.to_thread(write_memory, self.files, memory_update, before)
            except MemoryChangedError:
                log.info("MEMORY.md changed during consolidation; merging again")
                continue
            break
        else:
            raise MemoryChangedError(f"MEMORY.md changed during {MERGE_ATTEMPTS} merges in a row")
        self._refused.pop(ident, None)
        await self.sessions.mark_consolidated(session, stop)

    async def write_raw(
        self, session: Session, chunk: list[Message], stop: int, ident: str
    ) -> None:
        """Keep the chunk verbatim as a `[RAW]` entry (after repeated failures), then the marker."""
        self._refused.pop(ident, None)
        await self.files.aappend_history(self.transcript.raw_entry(chunk), entry_id=ident)
        await self.sessions.mark_consolidated(session, stop)


def write_memory(files: MemoryFiles, text: str, previous: str) -> None:
    """Replace MEMORY.md with `text` if it still holds `previous` (else MemoryChangedError)."""
    if len(previous) > _SHRINK_WARN_ABOVE and len(text) < len(previous) / 2:
        log.warning(
            "memory_update drops more than half of MEMORY.md (%d -> %d chars); "
            "previous version kept in memory/versions/",
            len(previous),
            len(text),
        )
    files.write_memory(text if text.endswith("\n") else text + "\n", expected=previous)


def entry_id(session: Session, start: int, stop: int) -> str:
    """A name for one chunk of one conversation, the same on every retry of its job."""
    origin = f"{session.key}\0{session.created_at}\0{start}\0{stop}"
    return hashlib.sha256(origin.encode("utf-8", "surrogatepass")).hexdigest()[:16]
