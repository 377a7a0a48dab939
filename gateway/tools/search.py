"""Memory search as the config sets it up: keywords always, meaning too with `memory.embeddings`.

Apart from gateway/service/app.py so that `memgate memory search` loads the model's SDK only when it
embeds the query (without embeddings it starts in a third of the time).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from gateway.config.models import Config
from gateway.state import index_path
from memory.search.searcher import MemorySearch
from memory.search.touched import TouchedFiles


@asynccontextmanager
async def open_search(
    config: Config, touched: TouchedFiles | None = None
) -> AsyncIterator[MemorySearch]:
    """Memory search on the workspace, semantic too when `memory.embeddings` is set. Given the
    files the process writes (`touched`), a search looks at every file only once a minute;
    without, at every search (`memgate memory search`, one query a process)."""
    async with AsyncExitStack() as stack:
        settings = config.memory.embeddings
        index = index_path(config.state_dir)
        if settings is None:
            search = MemorySearch(config.workspace, config.tz, db_path=index, touched=touched)
        else:
            from gateway.llm.clients import OpenAIEmbedder

            embedder = OpenAIEmbedder(
                base_url=settings.base_url,
                api_key=settings.api_key,
                model=settings.model,
                timeout=settings.timeout,
            )
            stack.push_async_callback(embedder.close)
            weights = (settings.vector_weight, settings.keyword_weight)
            search = MemorySearch(
                config.workspace,
                config.tz,
                db_path=index,
                embedder=embedder,
                weights=weights,
                touched=touched,
            )
        stack.push_async_callback(search.aclose)
        yield search
