"""`memgate memory search QUERY` as a person runs it: hits as path:line, date, kind and snippet."""

from __future__ import annotations

from pathlib import Path

from tests.test_cli import memgate
from tests.test_search import line_of, write_corpus


async def test_memory_search_prints_hits_and_builds_the_index(tmp_path: Path) -> None:
    """The first search builds .index/memory.db; hits print one per line; no match is not an error."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    workspace = home / "workspace"
    await write_corpus(workspace)
    env = {"OPENAI_API_KEY": "unused"}
    code, out, err = await memgate("memory", "search", "咖啡", home=home, env=env)
    assert code == 0, err
    line = line_of(workspace / "memory" / "HISTORY.md", "咖啡")
    first = out.splitlines()[0]
    assert first.startswith(f"memory/HISTORY.md:{line}  2026-01-06 08:00  history  ")
    assert "喝«咖啡»" in first and "\x1b[" not in out
    assert (workspace / ".index" / "memory.db").is_file()
    code, out, _ = await memgate(
        "memory", "search", "wifi", "password", "--limit", "1", home=home, env=env
    )
    assert code == 0 and out.startswith("sessions/discord:77.jsonl:")
    assert len(out.splitlines()) == 1
    code, out, _ = await memgate("memory", "search", "--rebuild", "xylophone", home=home, env=env)
    assert code == 0 and "no matches" in out
