"""Semantic memory search against the fake embeddings endpoint: blending, fallback, storage."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from datetime import UTC
from pathlib import Path

import pytest

from gateway.llm.clients import OpenAIEmbedder
from memory.files import MemoryFiles
from memory.search.searcher import Hit, MemorySearch
from tests.conftest import RuntimeFactory, inbound
from tests.corpus import CAR, write_corpus
from tests.fakes.llm import FakeLLM, error, text, tool_call, tool_results


@pytest.fixture
async def workspace(tmp_path: Path) -> Path:
    """The fixed search corpus plus one entry about a car."""
    root = tmp_path / "workspace"
    await write_corpus(root)
    MemoryFiles(root, UTC).append_history(CAR)
    return root


SearchFactory = Callable[..., MemorySearch]


@pytest.fixture
async def open_search(workspace: Path, fake_llm: FakeLLM) -> AsyncIterator[SearchFactory]:
    """A factory for MemorySearch on the corpus; embedder=True uses the fake endpoint."""
    opened: list[tuple[MemorySearch, OpenAIEmbedder | None]] = []

    def make(
        embedder: bool = True, model: str = "embed-a", weights: tuple[float, float] = (0.7, 0.3)
    ) -> MemorySearch:
        client = None
        if embedder:
            client = OpenAIEmbedder(base_url=fake_llm.url, api_key="k", model=model, timeout=5)
        search = MemorySearch(workspace, UTC, embedder=client, weights=weights)
        opened.append((search, client))
        return search

    yield make
    for search, client in opened:
        await search.aclose()
        if client is not None:
            await client.close()


def places(hits: list[Hit]) -> list[tuple[str, int]]:
    return [(hit.path, hit.line) for hit in hits]


def vector_models(workspace: Path) -> list[str]:
    with sqlite3.connect(workspace / ".index" / "memory.db") as conn:
        return [row[0] for row in conn.execute("SELECT model FROM vectors")]


async def test_synonym_found_by_meaning_not_by_keywords(
    open_search: SearchFactory, fake_llm: FakeLLM
) -> None:
    """'automobile' finds the entry about a car in the top 3; keywords alone find nothing."""
    assert await open_search(embedder=False).search("automobile") == []
    hits = await open_search().search("automobile", limit=3)
    assert any("car" in hit.snippet for hit in hits), hits
    assert fake_llm.embedding_requests[-1]["input"] == ["automobile"]


async def test_vector_weight_zero_keeps_keyword_order(open_search: SearchFactory) -> None:
    """With weights (0, 1) the hits are exactly the keyword-only hits, in the same order."""
    for query in ("Alice", "dentist reminder", "咖啡"):
        keyword = await open_search(embedder=False).search(query)
        blended = await open_search(weights=(0.0, 1.0)).search(query)
        assert keyword and places(blended) == places(keyword), query


async def test_vector_weight_one_ranks_by_meaning(open_search: SearchFactory) -> None:
    """With weights (1, 0) an entry without the word but with its synonym ranks first."""
    hits = await open_search(weights=(1.0, 0.0)).search("automobile", limit=1)
    assert "car" in hits[0].snippet


async def test_failing_endpoint_falls_back_to_keywords(
    open_search: SearchFactory, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """HTTP 500 from the embeddings endpoint: keyword hits, and a warning in the log."""
    fake_llm.embedding_error = error(500, "embedder down")
    with caplog.at_level(logging.WARNING, logger="memory.search.searcher"):
        hits = await open_search().search("Kyoto")
    assert places(hits) == places(await open_search(embedder=False).search("Kyoto"))
    assert any("embedder down" in r.getMessage() for r in caplog.records)
    assert fake_llm.embedding_requests  # it was asked, and failed


async def test_vectors_are_stored_once_and_batched(
    open_search: SearchFactory, workspace: Path, fake_llm: FakeLLM
) -> None:
    """Entries are embedded 64 at a time once; later refreshes embed only what is new."""
    for day in range(1, 29):
        for hour in range(4):
            MemoryFiles(workspace, UTC).append_history(f"[2026-02-{day:02d} {hour:02d}:00] n{day}")
    search = open_search()
    stats = await search.refresh()
    sizes = [len(r["input"]) for r in fake_llm.embedding_requests]
    assert max(sizes) == 64 and sum(sizes) == stats.embedded == len(vector_models(workspace))
    assert (await search.refresh()).embedded == 0
    assert len(fake_llm.embedding_requests) == len(sizes)
    MemoryFiles(workspace, UTC).append_history("[2026-03-01 09:00] A new bicycle.")
    await search.search("bicycle")
    assert [r["input"] for r in fake_llm.embedding_requests[len(sizes) :]] == [
        ["[2026-03-01 09:00] A new bicycle."],
        ["bicycle"],
    ]


async def test_changing_the_model_reembeds(
    open_search: SearchFactory, workspace: Path, fake_llm: FakeLLM
) -> None:
    """Vectors carry their model's name: another model embeds every entry again."""
    first = await open_search(model="embed-a").refresh()
    second = await open_search(model="embed-b").refresh()
    assert first.embedded == second.embedded > 0
    assert set(vector_models(workspace)) == {"embed-b"}
    assert {r["model"] for r in fake_llm.embedding_requests} == {"embed-a", "embed-b"}


async def test_without_embeddings_no_request_is_sent(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """With no memory.embeddings, memory_search runs on keywords and never calls the endpoint."""
    async with make_runtime() as runtime:
        await write_corpus(runtime.config.workspace)
        fake_llm.push(tool_call("memory_search", {"query": "Kyoto"}, call_id="s1"))
        fake_llm.push(text("ok"))
        await runtime.agent.handle(inbound("where did Alice travel?"))
    assert "Kyoto" in tool_results(fake_llm.chat_requests()[-1])[0]
    assert fake_llm.embedding_requests == []


async def test_agent_memory_search_uses_embeddings(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """memory.embeddings in the config: the agent's memory_search finds a car for 'automobile'."""
    settings = {"base_url": fake_llm.url, "api_key": "sk-embed-secret-0123", "model": "embed-x"}
    async with make_runtime({"memory": {"embeddings": settings}}) as runtime:
        workspace = runtime.config.workspace
        await write_corpus(workspace)
        MemoryFiles(workspace, UTC).append_history(CAR)
        fake_llm.push(tool_call("memory_search", {"query": "automobile", "limit": 3}, call_id="s1"))
        fake_llm.push(text("You sold it."))
        await runtime.agent.handle(inbound("what happened to my automobile?"))
    (found,) = tool_results(fake_llm.chat_requests()[-1])
    assert "old car to a colleague" in found
    requests = fake_llm.embedding_requests
    assert requests[-1]["input"] == ["automobile"]
    assert {r["model"] for r in requests} == {"embed-x"}
    assert requests[0]["_headers"]["authorization"] == "Bearer sk-embed-secret-0123"
