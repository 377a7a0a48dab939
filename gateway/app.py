"""Wiring: builds the memory stores, the provider and the agent from a Config.

Only this module and the CLI import everything; tests build the same runtime through
`open_runtime()` so they exercise the real wiring.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from gateway.agent import AgentLoop
from gateway.config import Config
from gateway.context import ContextBuilder
from gateway.errors import LLMError, LLMStatusError
from gateway.lock import WorkspaceLock
from gateway.metrics import Metrics
from gateway.provider import ChatProvider, OpenAIEmbedder, OpenAIProvider
from gateway.tools import Tool, ToolRegistry, WorkspaceFiles
from memory.budget import PromptBudget
from memory.compact import MemoryCompactor
from memory.consolidate import ConsolidationSettings, Consolidator
from memory.errors import ModelCallError
from memory.failures import FAILURE_REPORT
from memory.files import MemoryFiles
from memory.search import MemorySearch, search_tools
from memory.sessions import SessionStore
from memory.tokens import TokenCounter

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Everything one gateway process holds, for the CLI and the tests."""

    config: Config
    memory: MemoryFiles
    sessions: SessionStore
    counter: TokenCounter
    provider: ChatProvider
    agent: AgentLoop
    consolidator: Consolidator
    metrics: Metrics


class ProviderSummaryModel:
    """Adapts the chat provider to memory's `SummaryModel`, translating its errors."""

    def __init__(self, provider: ChatProvider) -> None:
        self._provider = provider

    async def call_tool(
        self, messages: list[dict[str, Any]], tool: dict[str, Any], *, force: bool
    ) -> Any:
        name = tool["function"]["name"]
        choice: str | dict[str, Any] = (
            {"type": "function", "function": {"name": name}} if force else "auto"
        )
        try:
            response = await self._provider.chat(messages, [tool], tool_choice=choice)
        except LLMStatusError as exc:
            refused = exc.status in (400, 422) and "tool_choice" in str(exc)
            raise ModelCallError(str(exc), rejected_tool_choice=refused) from exc
        except LLMError as exc:
            raise ModelCallError(str(exc)) from exc
        for call in response.tool_calls:
            if call.name == name:
                return call.arguments
        return None


def consolidation_settings(config: Config) -> ConsolidationSettings:
    memory = config.memory
    return ConsolidationSettings(
        budget=config.llm.budget,
        consolidate_at=memory.consolidate_at,
        consolidate_to=memory.consolidate_to,
        window=memory.window,
        workers=memory.workers,
        shared_groups=memory.groups == "shared",
        timeout=memory.timeout,
        archive_on_new=memory.consolidate_on_new,
    )


def ensure_workspace(config: Config) -> MemoryFiles:
    workspace = config.workspace
    for sub in ("memory", "sessions", "media"):
        (workspace / sub).mkdir(parents=True, exist_ok=True)
    memory = MemoryFiles(workspace, config.tz)
    memory.ensure()
    return memory


@asynccontextmanager
async def open_search(config: Config) -> AsyncIterator[MemorySearch]:
    """Memory search on the workspace, semantic too when `memory.embeddings` is set."""
    async with AsyncExitStack() as stack:
        settings = config.memory.embeddings
        if settings is None:
            search = MemorySearch(config.workspace, config.tz)
        else:
            embedder = OpenAIEmbedder(
                base_url=settings.base_url,
                api_key=settings.api_key,
                model=settings.model,
                timeout=settings.timeout,
            )
            stack.push_async_callback(embedder.close)
            weights = (settings.vector_weight, settings.keyword_weight)
            search = MemorySearch(config.workspace, config.tz, embedder=embedder, weights=weights)
        stack.push_async_callback(search.aclose)
        yield search


def make_provider(config: Config) -> OpenAIProvider:
    llm = config.llm
    return OpenAIProvider(
        base_url=llm.base_url,
        api_key=llm.api_key,
        model=llm.model,
        timeout=llm.timeout,
        max_retries=llm.max_retries,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
    )


@asynccontextmanager
async def open_runtime(
    config: Config, provider: ChatProvider | None = None
) -> AsyncIterator[Runtime]:
    """Build the runtime; resources close in reverse order on exit.

    An error raised inside the block comes out as itself: the task group that runs the
    consolidator would otherwise wrap it in an ExceptionGroup, hiding it from the CLI's handlers.
    """
    try:
        async with _build_runtime(config, provider) as runtime:
            yield runtime
    except ExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        error = group.exceptions[0]
        raise error from error.__cause__


@asynccontextmanager
async def _build_runtime(config: Config, provider: ChatProvider | None) -> AsyncIterator[Runtime]:
    async with AsyncExitStack() as stack:
        memory = await asyncio.to_thread(ensure_workspace, config)
        lock = WorkspaceLock(config.workspace)
        lock.acquire()
        stack.callback(lock.release)
        counter = await asyncio.to_thread(TokenCounter, config.llm.model)
        summarizer: ChatProvider
        if provider is None:
            # Two clients, two connection pools: a consolidation call held open for minutes
            # never takes the warm connection a reply is about to need.
            provider, summarizer = (make_provider(config), make_provider(config))
            stack.push_async_callback(provider.close)
            stack.push_async_callback(summarizer.close)
        else:
            summarizer = provider
        sessions = SessionStore(config.workspace / "sessions", config.tz)
        tools = ToolRegistry()
        for tool in WorkspaceFiles(config.workspace).tools():
            tools.add(tool)
        group_tools = ToolRegistry()
        for tool in WorkspaceFiles(config.workspace, hidden=("memory", "sessions")).tools():
            group_tools.add(tool)
        search = await stack.enter_async_context(open_search(config))
        for name, description, parameters, run in search_tools(search):
            tools.add(Tool(name, description, parameters, run))
        budget = PromptBudget(config.llm.budget, counter, config.memory.fixed_share)
        summary_model = ProviderSummaryModel(summarizer)
        compactor = MemoryCompactor(
            memory, budget, summary_model, config.memory.max_memory_tokens, config.memory.timeout
        )
        consolidator = Consolidator(
            sessions,
            memory,
            counter,
            summary_model,
            consolidation_settings(config),
            config.tz,
            budget=budget,
            compactor=compactor,
            failure_report=config.state_dir / FAILURE_REPORT,
        )
        metrics = Metrics()
        metrics.watch_consolidation(
            lambda: consolidator.runs,
            lambda: consolidator.failures_total,
            lambda: consolidator.queue_depth,
            lambda: consolidator.sessions_backing_off,
        )
        agent = AgentLoop(
            config=config,
            provider=provider,
            sessions=sessions,
            memory=memory,
            counter=counter,
            tools=tools,
            group_tools=group_tools,
            context=ContextBuilder(config.workspace, memory, config.tz, budget),
            keeper=consolidator,
            observer=metrics,
            budget=budget,
        )
        group = await stack.enter_async_context(asyncio.TaskGroup())
        worker = group.create_task(consolidator.run(), name="consolidator")

        async def stop_consolidation() -> None:
            # Runs before the task group exits: the running job gets its grace, the rest waits
            # for the next start (it is derived from the files).
            await consolidator.drain(config.shutdown_grace)
            worker.cancel()

        stack.push_async_callback(stop_consolidation)
        await consolidator.recover()
        yield Runtime(config, memory, sessions, counter, provider, agent, consolidator, metrics)
