"""memory_get confinement and output, the two agent tools as data, and the CLI's hit format."""

from __future__ import annotations

import io
import json
import os
from collections.abc import AsyncIterator
from datetime import UTC
from pathlib import Path

import pytest

from memory.errors import SearchPathError
from memory.search.display import format_hits, terminal_progress
from memory.search.searcher import Hit, MemorySearch
from memory.search.tools import SEARCH_PROMPT, search_tools
from tests.corpus import archived_path, line_of, write_corpus


@pytest.fixture
async def search(tmp_path: Path) -> AsyncIterator[MemorySearch]:
    """MemorySearch over the fixed corpus of test_search."""
    workspace = tmp_path / "workspace"
    await write_corpus(workspace)
    engine = MemorySearch(workspace, UTC)
    try:
        yield engine
    finally:
        await engine.aclose()


async def test_get_returns_the_real_numbered_lines(search: MemorySearch) -> None:
    """Lines come back exactly as in the file, numbered from from_line, with a pointer onward."""
    history = search.workspace / "memory" / "HISTORY.md"
    real = history.read_text(encoding="utf-8").splitlines()
    text = await search.get("memory/HISTORY.md", 3, 3)
    header, *body = text.splitlines()
    assert header == "memory/HISTORY.md lines 3-5 (more below: from_line=6)"
    assert body == [f"{n}: {real[n - 1]}" for n in (3, 4, 5)]
    tail = await search.get("memory/HISTORY.md", len(real), 10)
    assert tail.splitlines()[0] == f"memory/HISTORY.md lines {len(real)}-{len(real)}"
    assert "fewer than" in await search.get("memory/HISTORY.md", 500, 5)


async def test_get_shows_session_lines_as_messages(search: MemorySearch) -> None:
    """A session file reads one message per line: date, role and text; tool results shortened."""
    path = "sessions/telegram:42.jsonl"
    text = await search.get(path, 1, 10)
    lines = text.splitlines()[1:]
    assert lines[0].startswith("1: (session telegram:42, started ")
    mapo = line_of(search.workspace / path, "mapo tofu")
    assert f"{mapo}: [2026-01-09 10:00] user: What is a good recipe for mapo tofu" in text
    assert f"{mapo + 1}: [2026-01-09 10:30] assistant called x" in text
    assert f"{mapo + 2}: [2026-01-09 10:31] tool result (?): zebra" in text


async def test_get_follows_a_search_hit_into_the_archive(search: MemorySearch) -> None:
    """The path and line of a hit open the lines of that message, archived sessions included."""
    (hit, *_) = await search.search("寿司")
    assert hit.path == archived_path(search.workspace)
    text = await search.get(hit.path, hit.line, 1)
    assert text.splitlines()[1].startswith(f"{hit.line}: [2026-01-03 10:00] user: 日本語")


@pytest.mark.parametrize(
    "path",
    [
        "../secret.md",
        "memory/../../secret.md",
        "memory/../AGENTS.md",
        "/etc/passwd",
        "~/secret.md",
        "AGENTS.md",
        ".index/memory.db",
        "memory/link-out.md",
        "memory/dir-link/secret.md",
        "memory/nothing-here.md",
        "memory/2026-02-02.md",
        "memory",
        "",
        "memory/HISTORY.md\x00",
    ],
)
async def test_get_refuses_paths_outside_memory_and_sessions(
    search: MemorySearch, tmp_path: Path, path: str
) -> None:
    """`..`, absolute paths, files elsewhere in the workspace and links out are all refused."""
    secret = tmp_path / "secret.md"
    secret.write_text("swordfish\n", encoding="utf-8")
    (search.workspace / "AGENTS.md").write_text("agents\n", encoding="utf-8")
    os.symlink(secret, search.workspace / "memory" / "link-out.md")
    os.symlink(tmp_path, search.workspace / "memory" / "dir-link")
    loop = search.workspace / "memory" / "2026-02-02.md"
    os.symlink(loop, loop)
    with pytest.raises(SearchPathError):
        await search.get(path, 1, 5)
    assert await search.search("Kyoto")  # the index skips the loop and the links out


async def test_get_allows_links_that_stay_inside(search: MemorySearch) -> None:
    """A symlink from memory/ to a session file still lands inside, so it is readable."""
    target = search.workspace / "sessions" / "discord:77.jsonl"
    os.symlink(target, search.workspace / "memory" / "cabin.jsonl")
    assert "bluefalcon42" in await search.get("memory/cabin.jsonl", 1, 5)


async def test_tools_are_plain_data_with_json_schemas(search: MemorySearch) -> None:
    """search_tools gives memory_search and memory_get with schemas and text-returning callables."""
    tools = {
        name: (description, schema, run) for name, description, schema, run in search_tools(search)
    }
    assert list(tools) == ["memory_search", "memory_get"]
    _, schema, run_search = tools["memory_search"]
    assert schema["required"] == ["query"] and schema["type"] == "object"
    json.dumps(schema)
    output = await run_search({"query": "Kyoto", "limit": "2"})
    first = output.splitlines()[0]
    line = line_of(search.workspace / "memory" / "HISTORY.md", "Kyoto")
    assert first.startswith(f"memory/HISTORY.md:{line}  2026-01-02 09:15  history  ")
    assert "«Kyoto»" in first
    assert "memory_get" in output.splitlines()[-1]
    assert "No matches" in await run_search({"query": "xylophone"})
    assert (await run_search({"query": "  "})).startswith("Error:")
    _, schema, run_get = tools["memory_get"]
    assert schema["required"] == ["path"]
    text = await run_get({"path": "memory/HISTORY.md", "from_line": line, "lines": 1})
    assert "Kyoto" in text.splitlines()[1]
    assert (await run_get({"path": "../x"})).startswith("Error: ")
    assert (await run_get({})).startswith("Error: ")


def test_format_hits_for_the_terminal() -> None:
    """format_hits prints path:line, date, kind and snippet; color turns markers into ANSI bold."""
    hits = [
        Hit("memory/HISTORY.md", 3, "2026-01-06 08:00", "history", 1.5, "喝«咖啡»"),
        Hit("memory/MEMORY.md", 10, "", "memory", 1.2, "«coffee»"),
    ]
    assert format_hits(hits) == (
        "memory/HISTORY.md:3  2026-01-06 08:00  history  喝«咖啡»\n"
        "memory/MEMORY.md:10  -  memory  «coffee»"
    )
    assert "\x1b[1;33m咖啡\x1b[0m" in format_hits(hits, color=True)
    assert format_hits([]) == ""


def test_terminal_progress_draws_a_bar_and_ends_the_line() -> None:
    """The progress callback redraws one line and ends it when done."""
    stream = io.StringIO()
    show = terminal_progress(stream, width=10)
    for done in (0, 500_000, 1_000_000):
        show(done, 1_000_000)
    out = stream.getvalue()
    assert out.count("\r") == 3 and out.endswith("] 1.0/1.0 MB\n")
    assert "[#####.....]" in out


def test_prompt_names_both_tools() -> None:
    """The system prompt paragraph tells the model about memory_search and memory_get."""
    assert "memory_search" in SEARCH_PROMPT and "memory_get" in SEARCH_PROMPT
