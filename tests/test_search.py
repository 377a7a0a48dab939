"""Memory search over real files and a real SQLite index: ranking, Chinese, freshness, rebuilds."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, date
from pathlib import Path

import pytest

from memory.files import MemoryFiles
from memory.search.searcher import Hit, MemorySearch
from memory.sessions.store import SessionStore
from tests.corpus import (
    HISTORY,
    MEMORY,
    archived_path,
    line_of,
    write_corpus,
)


def append(path: Path, text: str, mode: str = "a") -> None:
    """Write to a file the way an editor or a crashed writer would (no atomic replace)."""
    with open(path, mode, encoding="utf-8") as handle:
        handle.write(text)


def remove_index(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def corpus_files(workspace: Path) -> list[Path]:
    return [*workspace.glob("memory/*.md"), *workspace.glob("sessions/**/*.jsonl")]


@pytest.fixture
async def workspace(tmp_path: Path) -> Path:
    """A workspace holding the fixed corpus."""
    root = tmp_path / "workspace"
    await write_corpus(root)
    return root


@pytest.fixture
async def search(workspace: Path) -> AsyncIterator[MemorySearch]:
    """MemorySearch on the corpus workspace, closed afterwards."""
    engine = MemorySearch(workspace, UTC)
    try:
        yield engine
    finally:
        await engine.aclose()


# (query, file, text on the line where the expected entry starts); ARCHIVE is resolved at run time.
ARCHIVE = "<archive>"
CASES = [
    ("Kyoto", "memory/HISTORY.md", "Kyoto"),
    ("ryokan Gion", "memory/HISTORY.md", "Kyoto"),
    ("nextcloud backups", "memory/HISTORY.md", "Nextcloud"),
    ("咖啡", "memory/HISTORY.md", "咖啡"),
    ("牛奶", "memory/HISTORY.md", "咖啡"),
    ("钢琴考试", "memory/HISTORY.md", "钢琴"),
    ("猫", "memory/HISTORY.md", "橘猫"),
    ("团子", "memory/HISTORY.md", "橘猫"),
    ("dentist reminder", "memory/HISTORY.md", "dentist"),
    ("half marathons", "memory/HISTORY.md", "marathon"),
    ("peanuts", "memory/MEMORY.md", "## Preferences"),
    ("绿茶", "memory/MEMORY.md", "## Preferences"),
    ("普通话", "memory/MEMORY.md", "## User Information"),
    ("aiogram", "memory/MEMORY.md", "## Project Context"),
    ("passport renewal", "memory/MEMORY.md", "## Important Notes"),
    ("oat milk", "memory/2026-01-15.md", "oat milk"),
    ("plumber", "memory/2026-01-15.md", "plumber"),
    ("mapo tofu", "sessions/telegram:42.jsonl", "mapo tofu"),
    ("杭州 爬山", "sessions/telegram:42.jsonl", "杭州"),
    ("北高峰", "sessions/telegram:42.jsonl", "北高峰"),
    ("寿司", ARCHIVE, "寿司"),
    ("築地", ARCHIVE, "築地"),
    ("wifi password", "sessions/discord:77.jsonl", "bluefalcon42"),
]


@pytest.mark.parametrize(("query", "target", "needle"), CASES, ids=[c[0] for c in CASES])
async def test_query_finds_its_target_in_the_top_three(
    search: MemorySearch, workspace: Path, query: str, target: str, needle: str
) -> None:
    """Each corpus query ranks the entry it is about among the first three hits, at its line."""
    if target == ARCHIVE:
        target = archived_path(workspace)
    expected = (target, line_of(workspace / target, needle))
    hits = await search.search(query, limit=3)
    assert expected in [(h.path, h.line) for h in hits], hits


async def test_words_inside_chinese_sentences_are_highlighted(search: MemorySearch) -> None:
    """咖啡 is found inside 我每天早上喝咖啡-style text and highlighted in the snippet, dated."""
    (hit, *_) = await search.search("咖啡")
    assert hit.kind == "history" and hit.date == "2026-01-06 08:00"
    assert "喝«咖啡»" in hit.snippet
    (cat, *_) = await search.search("猫")
    assert "«猫»" in cat.snippet


async def test_english_is_stemmed_and_case_insensitive(search: MemorySearch) -> None:
    """Upper case, plurals and other inflections match the words as written."""
    for query, highlighted in (
        ("MARATHON", "«marathon»"),
        ("trained", "«training»"),
        ("appointments", "«appointment»"),
        ("Backup", "«backups»"),
    ):
        hits = await search.search(query, limit=1)
        assert hits and highlighted in hits[0].snippet, query


async def test_tool_results_and_tool_calls_are_not_indexed(search: MemorySearch) -> None:
    """A word that only appears in a tool result finds nothing."""
    assert await search.search("zebra") == []


async def test_session_hits_carry_role_and_message_date(
    search: MemorySearch, workspace: Path
) -> None:
    """A session hit points at the message's own line, with its role and timestamp."""
    (hit, *_) = await search.search("北高峰")
    assert hit.kind == "assistant"
    assert hit.date == "2026-01-09 10:03"
    line = (workspace / hit.path).read_text(encoding="utf-8").splitlines()[hit.line - 1]
    assert "北高峰" in line


async def test_all_words_first_then_any_word(search: MemorySearch) -> None:
    """A query whose words never meet in one entry returns entries with some of them instead."""
    hits = await search.search("Kyoto plumber", limit=5)
    paths = {h.path for h in hits}
    assert {"memory/HISTORY.md", "memory/2026-01-15.md"} <= paths
    sentence = await search.search("喝咖啡的习惯", limit=3)
    assert sentence and "咖啡" in sentence[0].snippet


async def test_query_syntax_is_never_an_error(search: MemorySearch) -> None:
    """FTS5 operators, quotes and stray punctuation in a query are just text."""
    for query in (
        '"',
        "AND",
        "NOT OR",
        "body:Kyoto",
        "(Kyoto",
        "Kyoto*",
        "^",
        "NEAR(a b)",
        "*",
        "-",
    ):
        await search.search(query)
    assert await search.search("???") == []
    assert [h.path for h in await search.search('"trip to Kyoto"')] == ["memory/HISTORY.md"]


async def test_recency_breaks_ties(tmp_path: Path) -> None:
    """Two entries that score the same come newest first."""
    files = MemoryFiles(tmp_path, UTC)
    files.append_history("[2026-02-01 10:00] Renewed the car insurance with Acme.")
    files.append_history("[2026-03-01 10:00] Renewed the car insurance with Acme.")
    files.append_history("[2026-01-01 10:00] Renewed the car insurance with Acme.")
    engine = MemorySearch(tmp_path, UTC)
    try:
        hits = await engine.search("insurance")
    finally:
        await engine.aclose()
    assert [h.date for h in hits] == ["2026-03-01 10:00", "2026-02-01 10:00", "2026-01-01 10:00"]


# -- freshness -------------------------------------------------------------------------------------
async def test_appended_history_entry_is_found_on_the_next_query(
    search: MemorySearch, workspace: Path
) -> None:
    """What the consolidator appends to HISTORY.md is searchable on the very next query."""
    assert await search.search("Zanzibar") == []
    MemoryFiles(workspace, UTC).append_history(
        "[2026-01-20 18:00] Alice booked flights to Zanzibar for the honeymoon in September."
    )
    (hit,) = await search.search("Zanzibar")
    assert hit.path == "memory/HISTORY.md"
    assert hit.line == line_of(workspace / "memory/HISTORY.md", "Zanzibar")
    assert hit.date == "2026-01-20 18:00"


async def test_an_append_indexes_only_the_new_part(search: MemorySearch, workspace: Path) -> None:
    """Growing HISTORY.md or a session adds entries without touching the ones already indexed."""
    await search.refresh()
    MemoryFiles(workspace, UTC).append_history("[2026-01-21 09:00] New entry about kayaking.")
    stats = await search.refresh()
    assert (stats.files, stats.added, stats.removed) == (1, 1, 0)
    store = SessionStore(workspace / "sessions", UTC)
    session = await store.get("discord:77")
    await store.add_messages(session, [{"role": "user", "content": "kayak rental prices?"}])
    stats = await search.refresh()
    assert (stats.files, stats.added, stats.removed) == (1, 1, 0)
    assert (await search.refresh()).files == 0


async def test_half_written_history_entry_is_indexed_whole(
    search: MemorySearch, workspace: Path
) -> None:
    """An entry caught mid-write is indexed again, whole, once its blank line arrives."""
    history = workspace / "memory" / "HISTORY.md"
    append(history, "[2026-01-22 10:00] The boiler was serviced")
    assert [h.path for h in await search.search("boiler")] == ["memory/HISTORY.md"]
    append(history, " and the technician recommended descaling.\n\n")
    (hit,) = await search.search("boiler descaling")
    assert "technician" in hit.snippet
    assert len(await search.search("boiler")) == 1


async def test_rewritten_files_are_reindexed(search: MemorySearch, workspace: Path) -> None:
    """A MEMORY.md rewrite, a shortened HISTORY.md and a replaced note are indexed afresh."""
    files = MemoryFiles(workspace, UTC)
    assert await search.search("aiogram")
    files.write_memory(MEMORY.replace("aiogram", "python-telegram-bot"))
    assert await search.search("aiogram") == []
    assert await search.search("python-telegram-bot")
    files.history_md.write_text(HISTORY[0] + "\n\n", encoding="utf-8")  # a person cut it down
    assert await search.search("Nextcloud") == []
    assert await search.search("Kyoto")
    note = files.daily_note_path(date(2026, 1, 15))
    note.write_text("Pick up the dry cleaning.\n", encoding="utf-8")
    assert await search.search("plumber") == []
    assert await search.search("dry cleaning")
    note.unlink()
    assert await search.search("dry cleaning") == []


async def test_history_edited_in_place_with_growth_is_reindexed(
    search: MemorySearch, workspace: Path
) -> None:
    """An edit before the end (same size or longer) is not mistaken for an append."""
    await search.refresh()
    history = workspace / "memory" / "HISTORY.md"
    text = history.read_text(encoding="utf-8").replace("Kyoto", "Osaka")
    append(history, text + "[2026-01-23 10:00] Extra.\n\n", "w")  # same inode, rewritten
    assert await search.search("Kyoto") == []
    assert await search.search("Osaka")


async def test_rotated_session_moves_to_the_archive(search: MemorySearch, workspace: Path) -> None:
    """/new moves a session file; its messages are then found under sessions/archive/."""
    assert [h.path for h in await search.search("bluefalcon42")] == ["sessions/discord:77.jsonl"]
    await SessionStore(workspace / "sessions", UTC).rotate("discord:77")
    (hit,) = await search.search("bluefalcon42")
    assert hit.path.startswith("sessions/archive/discord:77.")


async def test_torn_session_line_waits_until_complete(
    search: MemorySearch, workspace: Path
) -> None:
    """A session line without its newline yet is not indexed; once complete, it is."""
    path = workspace / "sessions" / "discord:77.jsonl"
    line = '{"role":"user","content":"where is the snorkel gear?","timestamp":"2026-01-12T10:00:00+00:00"}'
    append(path, line[:40])
    assert await search.search("snorkel") == []
    append(path, line[40:] + "\n")
    (hit,) = await search.search("snorkel")
    assert hit.line == line_of(path, "snorkel") and hit.kind == "user"


# -- rebuilding ------------------------------------------------------------------------------------
async def results(engine: MemorySearch) -> list[list[Hit]]:
    return [await engine.search(query, limit=3) for query, _, _ in CASES]


async def test_deleted_index_is_rebuilt_with_the_same_results(workspace: Path) -> None:
    """Deleting memory.db, between runs or under a running search, rebuilds the same answers."""
    db = workspace / ".index" / "memory.db"
    engine = MemorySearch(workspace, UTC)
    first = await results(engine)
    await engine.aclose()
    remove_index(db)
    engine = MemorySearch(workspace, UTC)
    try:
        assert await results(engine) == first
        db.unlink()  # while it is open
        assert await results(engine) == first
        assert db.exists()
    finally:
        await engine.aclose()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "zeroed"])
async def test_corrupt_index_is_rebuilt_with_the_same_results(
    workspace: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A memory.db that is not a database, cut short or zeroed is rebuilt from the files."""
    db = workspace / ".index" / "memory.db"
    engine = MemorySearch(workspace, UTC)
    first = await results(engine)
    await engine.aclose()
    data = db.read_bytes()
    remove_index(db)
    if damage == "garbage":
        db.write_bytes(b"this is not a database" * 200)
    elif damage == "truncated":
        db.write_bytes(data[: len(data) // 3])
    else:
        db.write_bytes(data[:100] + b"\0" * (len(data) - 100))
    engine = MemorySearch(workspace, UTC)
    try:
        assert await results(engine) == first
    finally:
        await engine.aclose()
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


async def test_other_schema_or_timezone_rebuilds(workspace: Path) -> None:
    """An index from another schema version, or made for another timezone, is built again."""
    db = workspace / ".index" / "memory.db"
    engine = MemorySearch(workspace, UTC)
    first = await results(engine)
    await engine.aclose()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
        conn.execute("DELETE FROM fts")
    conn.close()
    engine = MemorySearch(workspace, UTC)
    try:
        assert await results(engine) == first
    finally:
        await engine.aclose()


async def test_rebuild_reports_progress(search: MemorySearch, workspace: Path) -> None:
    """rebuild() indexes every file again and reports bytes done out of the total."""
    calls: list[tuple[int, int]] = []
    stats = await search.rebuild(lambda done, total: calls.append((done, total)))
    total = sum(p.stat().st_size for p in corpus_files(workspace))
    assert stats.files == 6 and calls[-1] == (total, total)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert await search.search("Kyoto")


async def test_links_leading_out_are_not_indexed(search: MemorySearch, tmp_path: Path) -> None:
    """A note that is a symlink to a file outside the workspace stays out of the index."""
    secret = tmp_path / "secret.md"
    secret.write_text("The launch code is swordfish.\n", encoding="utf-8")
    workspace = search.workspace
    os.symlink(secret, workspace / "memory" / "2026-01-30.md")
    assert await search.search("swordfish") == []
