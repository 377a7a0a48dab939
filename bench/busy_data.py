"""Figure h's data: the workspace and state folder of a bot that has been busy for a year.

10,000 sessions holding 1,000,000 messages between them (a few big chats, a long tail; one in ten
a conversation /new archived), each file written in memgate's own record format (`encode_record`)
with the consolidation markers a running bot leaves behind, the session index built by memgate's
own loader, a HISTORY.md and a MEMORY.md of the size such a year leaves, and the search index
built by `MemorySearch`. Made in a temp folder by the bench, never committed.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.search_bench import Corpus
from gateway.cli.templates import WORKSPACE_FILES
from gateway.state import index_path
from memory.files import MemoryFiles
from memory.search.searcher import MemorySearch
from memory.sessions.file import encode_record, file_name
from memory.sessions.index import load_session

CHATS = 10_000
MESSAGES = 1_000_000
HISTORY_ENTRIES = 20_000  # one a consolidation run of ~50 messages
MEMORY_SECTIONS = 20  # MEMORY.md at about 3,400 tokens, under its default cap of 4,000
CONSOLIDATE_EVERY = 50  # messages a consolidation run takes once a chat passed the window
WINDOW = 100  # memory.window's default
ARCHIVED_EVERY = 10  # one session in ten is a conversation /new archived
SEED = 20261203
YEAR_START = datetime(2025, 12, 1, tzinfo=UTC)


@dataclass(frozen=True)
class BusyYear:
    """Where the data is and what it holds."""

    workspace: Path
    state_dir: Path
    chats: list[int]  # Telegram chat ids of the live sessions, biggest chat first
    sizes: list[int]  # messages of each session, live and archived, biggest first
    bytes_on_disk: int
    seconds: dict[str, float]  # time spent on each part of the generation


def chat_sizes(chats: int = CHATS, total: int = MESSAGES) -> list[int]:
    """Even message counts (user and assistant turns) summing to `total`, Zipf-like: the chat of
    rank r gets about 1/r of the first one's, none fewer than 4."""
    weights = [1 / (rank + 2) for rank in range(1, chats + 1)]
    scale = (total - 4 * chats) / sum(weights)
    sizes = [4 + 2 * int(w * scale / 2) for w in weights]
    sizes[0] += total - sum(sizes)  # the rounding's rest goes to the busiest chat
    return sizes


class Phrases:
    """Message text fast enough for a million messages: each is two fragments of a pool drawn
    once from the search bench's corpus (Zipf-distributed words, a third of it Chinese), so
    words repeat as they do in chats and no two neighbouring messages are alike."""

    def __init__(self, corpus: Corpus, size: int = 20_000) -> None:
        self.short = [corpus.text(30) for _ in range(size)]
        self.long = [corpus.text(90) for _ in range(size)]
        self.rng = random.Random(SEED)

    def user(self) -> str:
        pick = self.rng.randrange
        return f"{self.short[pick(len(self.short))]} {self.short[pick(len(self.short))]}"

    def assistant(self) -> str:
        pick = self.rng.randrange
        return f"{self.long[pick(len(self.long))]} {self.long[pick(len(self.long))]}"


def session_lines(key: str, count: int, phrases: Phrases, start: datetime) -> list[bytes]:
    """A chat's file as a year of turns leaves it: metadata, messages and, once the chat passed
    the window, a consolidation marker every CONSOLIDATE_EVERY messages."""
    step = timedelta(minutes=max(1, 365 * 24 * 60 // max(count, 1)))
    lines = [
        encode_record(
            {"_type": "metadata", "key": key, "created_at": start.isoformat(), "version": 1}
        )
    ]
    moment = start
    for index in range(count):
        user = index % 2 == 0
        content = phrases.user() if user else phrases.assistant()
        stamp = moment.isoformat(timespec="seconds")
        record = {"role": "user" if user else "assistant", "content": content, "timestamp": stamp}
        lines.append(encode_record(record))
        moment += step
        done = index + 1
        if done >= WINDOW and done % CONSOLIDATE_EVERY == 0:
            marker = {"_type": "consolidated", "last_consolidated": done - CONSOLIDATE_EVERY}
            lines.append(encode_record({**marker, "timestamp": stamp}))
    return lines


def write_sessions(sessions: Path, sizes: list[int], phrases: Phrases) -> list[int]:
    """One file per session: Telegram private chats (`telegram:<id>`), one in ARCHIVED_EVERY of
    them an earlier conversation of the chat before it that /new archived (consolidated to its
    end, as archival leaves it). Returns the chat ids of the live sessions, biggest first."""
    (sessions / "archive").mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    chats: list[int] = []
    for rank, count in enumerate(sizes):
        start = YEAR_START + timedelta(days=rng.randint(0, 30))
        archived = rank % ARCHIVED_EVERY == ARCHIVED_EVERY - 1
        chat_id = chats[-1] if archived else 100_000 + rank
        key = f"telegram:{chat_id}"
        lines = session_lines(key, count, phrases, start)
        if archived:
            end = {"_type": "consolidated", "last_consolidated": count}
            lines.append(encode_record({**end, "timestamp": start.isoformat()}))
            stamp = (start + timedelta(days=200)).strftime("%Y%m%dT%H%M%S")
            path = sessions / "archive" / f"{file_name(key)[: -len('.jsonl')]}.{stamp}.jsonl"
        else:
            path = sessions / file_name(key)
            chats.append(chat_id)
        with open(path, "wb") as handle:
            handle.write(b"".join(lines))
    return chats


def index_sessions(sessions: Path) -> int:
    """Build each session's index as memgate's loader does the first time it reads a file whose
    loaded part starts past its beginning; returns how many were written."""
    written = 0
    for name in os.listdir(sessions):
        if name.endswith(".jsonl") and load_session(sessions / name).base:
            written += 1
    return written


def write_memory_files(workspace: Path) -> None:
    """The bootstrap files as `memgate init` writes them (all an empty workspace has)."""
    (workspace / "memory").mkdir(parents=True, exist_ok=True)
    for name, text in WORKSPACE_FILES.items():
        (workspace / name).write_text(text, encoding="utf-8")


def write_memory(workspace: Path, corpus: Corpus) -> None:
    """The bootstrap files, HISTORY.md with a year of consolidation entries, MEMORY.md near its
    cap."""
    write_memory_files(workspace)
    memory = workspace / "memory"
    step = timedelta(minutes=365 * 24 * 60 // HISTORY_ENTRIES)
    with open(memory / "HISTORY.md", "w", encoding="utf-8") as handle:
        for index in range(HISTORY_ENTRIES):
            stamp = (YEAR_START + step * index).strftime("[%Y-%m-%d %H:%M]")
            handle.write(f"{stamp} {corpus.text(200)} {corpus.text(120)}\n\n")
    body = "\n\n".join(
        f"## Section {i}\n\n- {corpus.english(40)}\n- {corpus.english(30)}\n- {corpus.english(20)}"
        for i in range(MEMORY_SECTIONS)
    )
    MemoryFiles(workspace, UTC).write_memory(f"# Long-term Memory\n\n{body}\n")


def build(root: Path, sizes: list[int] | None = None) -> BusyYear:
    """Write the whole year under `root` (workspace/ and state/), search index included."""
    sizes = sizes or chat_sizes(CHATS, MESSAGES)
    workspace, state_dir = root / "workspace", root / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(SEED)
    seconds: dict[str, float] = {}
    began = time.perf_counter()
    write_memory(workspace, corpus)
    chats = write_sessions(workspace / "sessions", sizes, Phrases(corpus))
    seconds["files"] = time.perf_counter() - began
    # The two indexes read the same files and write apart: one in a process of its own.
    began = time.perf_counter()
    with ProcessPoolExecutor(1) as pool:
        sessions_indexed = pool.submit(index_sessions, workspace / "sessions")
        asyncio.run(_build_search(workspace, index_path(state_dir)))
        seconds["search index"] = time.perf_counter() - began
        sessions_indexed.result()
    seconds["both indexes"] = time.perf_counter() - began
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return BusyYear(workspace, state_dir, chats, sizes, size, seconds)


async def _build_search(workspace: Path, db: Path) -> None:
    search = MemorySearch(workspace, UTC, db_path=db)
    try:
        await search.rebuild()
    finally:
        await search.aclose()
