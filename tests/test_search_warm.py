"""memgate run brings the search index up to date once it has settled, so that the model's first
memory_search does not build it inside a turn; a stop ends that work after the file at hand."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from gateway.service.app import Runtime, open_runtime
from gateway.service.run import warm_search
from tests.conftest import build_config
from tests.fakes.llm import FakeLLM
from tests.resilience.harness import until

FILES = 2000


def _write_sessions(workspace: Path, count: int) -> None:
    sessions = workspace / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        meta = {"_type": "metadata", "key": f"test:{number}", "created_at": "2026-01-01T00:00:00"}
        said = {"role": "user", "content": f"the heron number {number} flew over the pond"}
        text = "".join(json.dumps(line) + "\n" for line in (meta, said))
        (sessions / f"test:{number}.jsonl").write_text(text, encoding="utf-8")


def _indexed_files(runtime: Runtime) -> int:
    """Files in the index as another reader sees them (the index's own lock not taken)."""
    assert runtime.search is not None
    path = runtime.search.index.db.path
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM files").fetchone()[0])
        except sqlite3.OperationalError:  # its tables not made yet
            return 0


async def test_a_missing_index_is_built_after_start_without_a_search(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """With no index, the settled service indexes every session: no search had to ask for it."""
    workspace = tmp_path / "workspace"
    _write_sessions(workspace, 20)
    async with open_runtime(build_config(workspace, fake_llm.url)) as runtime:
        assert runtime.search is not None
        async with asyncio.timeout(60):
            await warm_search(runtime.search, [], runtime.agent.activity)
        assert _indexed_files(runtime) >= 20
        hits = await runtime.search.search("heron 7")
        assert "sessions/test:7.jsonl" in {hit.path for hit in hits}


async def test_a_stop_ends_the_indexing_after_the_file_at_hand(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Cancelled (the service stops) once it has indexed a file, the work in its thread stops
    soon after instead of indexing the rest, which a stop would otherwise wait for."""
    workspace = tmp_path / "workspace"
    _write_sessions(workspace, FILES)
    async with open_runtime(build_config(workspace, fake_llm.url)) as runtime:
        assert runtime.search is not None
        warming = asyncio.create_task(warm_search(runtime.search, [], runtime.agent.activity))
        await until(lambda: _indexed_files(runtime) > 0, 60, "a first file indexed", step=0.01)
        warming.cancel()
        await asyncio.gather(warming, return_exceptions=True)
        # The index's lock is free once its thread has stopped: a count through it waits for that.
        _, files = await asyncio.to_thread(runtime.search.index.stats)
        assert 0 < files < FILES
