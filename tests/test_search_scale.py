"""Memory search at a year's size: what a query costs is bounded, and the kept file table stays true."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

from memory.search.index import SearchIndex
from memory.search.text import Query, parse_query


def _query(text: str) -> Query:
    parsed = parse_query(text)
    assert parsed is not None
    return parsed


def _history(workspace: Path, entries: list[str]) -> Path:
    path = workspace / "memory" / "HISTORY.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(f"[2026-01-{1 + i % 28:02d} 10:00] {e}\n\n" for i, e in enumerate(entries))
    )
    return path


def test_a_word_in_more_entries_than_the_window_is_ranked_among_the_last_indexed(
    tmp_path: Path,
) -> None:
    """Past the rank window, older entries are not ranked, however well they would score."""
    workspace = tmp_path / "workspace"
    old = [f"lantern lantern lantern lantern old {i}" for i in range(5)]
    new = [f"a lantern among other words, new {i}" for i in range(25)]
    _history(workspace, old + new)
    index = SearchIndex(workspace, UTC, tmp_path / "index.db", rank_window=10)
    try:
        hits = index.search(_query("lantern"), 5)
    finally:
        index.close()
    assert len(hits) == 5
    assert all("new" in hit.highlighted for hit in hits)
    first_ranked = 2 * (len(old) + len(new) - 10) + 1  # entry lines are 1, 3, 5, …
    assert min(hit.line for hit in hits) >= first_ranked


def test_entries_that_tie_past_the_limit_are_the_newest(tmp_path: Path) -> None:
    """More entries scoring the same than a query returns: the newest are the ones returned."""
    workspace = tmp_path / "workspace"
    _history(workspace, [f"a red kite over the hill, day {i}" for i in range(25)])
    index = SearchIndex(workspace, UTC, tmp_path / "index.db")
    try:
        hits = index.search(_query("kite"), 5)
    finally:
        index.close()
    assert [hit.line for hit in hits] == [49, 47, 45, 43, 41]  # entries 24 to 20, newest first


def test_what_another_process_indexed_is_found_once_and_after_its_rebuild(tmp_path: Path) -> None:
    """Two indexes on one database (the service and `memory search`) neither miss nor double an entry."""
    workspace = tmp_path / "workspace"
    path = _history(workspace, ["the blue door"])
    db = tmp_path / "index.db"
    service, command = SearchIndex(workspace, UTC, db), SearchIndex(workspace, UTC, db)
    try:
        assert len(service.search(_query("door"), 5)) == 1
        with path.open("a") as handle:
            handle.write("[2026-02-01 10:00] a quokka at the door\n\n")
        assert len(command.search(_query("quokka"), 5)) == 1
        assert len(service.search(_query("quokka"), 5)) == 1
        assert len(service.search(_query("door"), 5)) == 2
        command.rebuild()
        with path.open("a") as handle:
            handle.write("[2026-02-02 10:00] a wombat by the door\n\n")
        assert len(service.search(_query("door"), 5)) == 3
        assert len(command.search(_query("wombat"), 5)) == 1
    finally:
        service.close()
        command.close()
