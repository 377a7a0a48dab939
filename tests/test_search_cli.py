"""`memgate memory search QUERY` as a person runs it: hits as path:line, date, kind and snippet."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

from memory.files import MemoryFiles
from tests.conftest import IMPORT_TIMES, imported, memgate
from tests.corpus import CAR, line_of, write_corpus
from tests.fakes.llm import FakeLLM, error


async def test_memory_search_prints_hits_and_builds_the_index(tmp_path: Path) -> None:
    """The first search builds the index in the state folder; one hit per line; no match exits 1."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    workspace = home / "workspace"
    await write_corpus(workspace)
    env = {"OPENAI_API_KEY": "unused"}
    code, out, err = await memgate(
        "memory", "search", "咖啡", home=home, env={**env, **IMPORT_TIMES}
    )
    assert code == 0, err
    assert "openai" not in imported(err)  # keywords only: the model's SDK is not loaded
    line = line_of(workspace / "memory" / "HISTORY.md", "咖啡")
    first = out.splitlines()[0]
    assert first.startswith(f"memory/HISTORY.md:{line}  2026-01-06 08:00  history  ")
    assert "喝«咖啡»" in first and "\x1b[" not in out
    assert (home / "state" / "index" / "memory.db").is_file()
    assert not (workspace / ".index").exists()
    code, out, _ = await memgate(
        "memory", "search", "wifi", "password", "--limit", "1", home=home, env=env
    )
    assert code == 0 and out.startswith("sessions/discord:77.jsonl:")
    assert len(out.splitlines()) == 1
    code, out, err = await memgate("memory", "search", "--rebuild", "xylophone", home=home, env=env)
    assert (code, out) == (1, "") and "no matches" in err  # as grep


async def test_memory_search_with_embeddings(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """With memory.embeddings the CLI finds by meaning; a failing endpoint leaves keyword hits."""
    workspace = tmp_path / "workspace"
    await write_corpus(workspace)
    MemoryFiles(workspace, UTC).append_history(CAR)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {workspace}\nllm:\n  api_key: unused\nmemory:\n  embeddings:\n"
        f"    base_url: {fake_llm.url}\n    api_key: sk-cli-embed-key-42\n"
    )
    args = ("memory", "search", "--config", str(config), "-n", "3")
    code, out, err = await memgate(*args, "automobile", home=tmp_path / "home", env=IMPORT_TIMES)
    assert code == 0, err
    assert "old car to a colleague" in out and "openai" in imported(err)
    assert {r["model"] for r in fake_llm.embedding_requests} == {"text-embedding-3-small"}
    fake_llm.embedding_error = error(500, "embedder down")
    code, out, err = await memgate(*args, "Kyoto", home=tmp_path / "home")
    assert code == 0 and out.startswith("memory/HISTORY.md:") and "«Kyoto»" in out
    assert "embedder down" in err and "sk-cli-embed-key-42" not in err
