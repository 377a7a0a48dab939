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
from typing import TYPE_CHECKING

from gateway.agent.context import ContextBuilder
from gateway.agent.loop import AgentLoop
from gateway.agent.subagent_turn import SubagentTurn
from gateway.agent.subagents import Subagents
from gateway.automation.clock import Clock, SystemClock
from gateway.automation.jobs import JobError, JobStore
from gateway.automation.scheduler import Scheduler
from gateway.config.models import Config, LLMConfig, TranscriptionConfig
from gateway.errors import MemgateError, unwrap_group
from gateway.llm.gate import GatedProvider, Priority, endpoint_gate
from gateway.llm.on_demand import LazyProvider, OnDemand, OnDemandTranscriber
from gateway.llm.server_info import PROFILE_TIMEOUT
from gateway.llm.summary import OutputLimit, ProviderSummaryModel
from gateway.llm.types import ChatProvider, ToolSupport, VisionSupport
from gateway.media.documents import pdf_bytes_text
from gateway.media.reader import MediaReader
from gateway.service.lock import WorkspaceLock
from gateway.service.metrics import Metrics
from gateway.skills.catalog import SkillCatalog
from gateway.state import (
    check_apart,
    mcp_tools_path,
    move_workspace_state,
    token_calibration_path,
)
from gateway.tools.exec import owner_tools
from gateway.tools.jobs import JobTools
from gateway.tools.mcp.demand import OnDemandServers
from gateway.tools.registry import Tool
from gateway.tools.search import open_search
from gateway.tools.toolbox import ToolBox
from gateway.tools.web.tools import web_tools
from memory.budget import PromptBudget
from memory.calibration import TokenCalibration
from memory.consolidation.compact import MemoryCompactor
from memory.consolidation.consolidator import ConsolidationSettings, Consolidator
from memory.consolidation.dedupe import UPDATE_REPORT, UpdateCurator, UpdateRules
from memory.consolidation.failures import FAILURE_REPORT
from memory.fileio import ensure_private_dir
from memory.files import MemoryFiles
from memory.forgotten import FORGOTTEN_FILE, ForgottenLines
from memory.search.searcher import MemorySearch
from memory.search.tools import search_tools
from memory.search.touched import TouchedFiles
from memory.sessions.store import SessionStore
from memory.tokens import TokenCounter

if TYPE_CHECKING:
    from gateway.llm.clients import OpenAITranscriber
    from gateway.llm.provider import OpenAIProvider
    from gateway.tools.mcp.servers import McpServers

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
    scheduler: Scheduler  # its loop runs in `memgate run`, which can deliver to chats
    mcp: McpServers | None = None
    search: MemorySearch | None = None  # its embeddings' state is reported by /healthz


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


def update_curator(config: Config) -> UpdateCurator:
    """What a memory_update may bring into MEMORY.md (`memory.updates`, the forgotten lines)."""
    rules = config.memory.updates
    return UpdateCurator(
        UpdateRules(rules.max_drop_share, rules.guard_from_lines),
        ForgottenLines(config.state_dir / FORGOTTEN_FILE),
        config.state_dir / UPDATE_REPORT,
    )


def ensure_workspace(config: Config) -> MemoryFiles:
    workspace = config.workspace
    for sub in ("memory", "sessions", "media", "groups"):
        ensure_private_dir(workspace / sub)
    ensure_private_dir(config.state_dir)
    memory = MemoryFiles(workspace, config.tz)
    memory.ensure()
    return memory


def make_provider(
    config: Config,
    tool_support: ToolSupport | None = None,
    vision_support: VisionSupport | None = None,
    llm: LLMConfig | None = None,
) -> OpenAIProvider:
    """The client of `llm` (by default the chat model's section, config.llm)."""
    from gateway.llm.provider import OpenAIProvider  # the openai SDK: see llm/on_demand.py

    llm = llm or config.llm
    return OpenAIProvider(
        base_url=llm.base_url,
        api_key=llm.api_key,
        model=llm.model,
        timeout=llm.timeout,
        max_retries=llm.max_retries,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        tool_support=tool_support or ToolSupport(llm.tools),
        vision_support=vision_support or VisionSupport(llm.vision, llm.model),
    )


def make_transcriber(config: Config, settings: TranscriptionConfig) -> OpenAITranscriber:
    """The speech-to-text client of `llm.transcription`, by default on the chat endpoint."""
    from gateway.llm.clients import OpenAITranscriber

    return OpenAITranscriber(
        base_url=settings.base_url or config.llm.base_url,
        api_key=config.llm.api_key if settings.api_key is None else settings.api_key,
        model=settings.model,
        timeout=settings.timeout,
    )


@asynccontextmanager
async def open_runtime(
    config: Config,
    provider: ChatProvider | None = None,
    clock: Clock | None = None,
    *,
    mcp_on_demand: bool = False,
    mcp_held: bool = False,
) -> AsyncIterator[Runtime]:
    """Build the runtime; resources close in reverse order on exit.

    An error raised inside the block comes out as itself: the task group that runs the
    consolidator would otherwise wrap it in an ExceptionGroup, hiding it from the CLI's handlers.
    `mcp_on_demand` (a one-shot chat) starts each MCP server only when its tools are called
    (gateway/tools/mcp/demand.py); `Runtime.mcp` is then None. With `mcp_held` (memgate run) the
    servers wait for `Runtime.mcp.release()`, once the channels are connected.
    """
    with unwrap_group():
        mcp_start = "on demand" if mcp_on_demand else "held" if mcp_held else "now"
        runtime_of = _build_runtime(config, provider, clock or SystemClock(), mcp_start)
        async with runtime_of as runtime:
            yield runtime


@asynccontextmanager
async def _build_runtime(
    config: Config, provider: ChatProvider | None, clock: Clock, mcp_start: str
) -> AsyncIterator[Runtime]:
    async with AsyncExitStack() as stack:
        check_apart(config.workspace, config.state_dir, config.source)
        memory = await asyncio.to_thread(ensure_workspace, config)
        lock = WorkspaceLock(config.workspace, config.state_dir)
        lock.acquire()
        stack.callback(lock.release)
        await asyncio.to_thread(move_workspace_state, config.workspace, config.state_dir)
        # The vocabulary is checked here but loaded by the first turn that counts (tokens.py).
        counter = await asyncio.to_thread(TokenCounter, config.llm.model)
        tool_support = ToolSupport(config.llm.tools)
        vision_support = VisionSupport(config.llm.vision, config.llm.model)
        if provider is None:
            provider, summarizer, summary_tools = _gated_providers(
                config, tool_support, vision_support
            )
            stack.push_async_callback(provider.close)
            stack.push_async_callback(summarizer.close)
            summary_model = ProviderSummaryModel(summarizer.get, summary_tools)
        else:
            given = provider
            summary_model = ProviderSummaryModel(
                lambda: given, getattr(given, "tool_support", tool_support)
            )
        # The store tells search what it wrote: a search then reads those files, not the year.
        touched = TouchedFiles()
        sessions = SessionStore(config.workspace / "sessions", config.tz, on_write=touched.add)
        search = await stack.enter_async_context(open_search(config, touched))
        memory_tools = [Tool(*entry) for entry in search_tools(search)]
        group = await stack.enter_async_context(asyncio.TaskGroup())
        mcp, offered = _start_mcp(config, stack, group, mcp_start)
        try:
            store = await asyncio.to_thread(JobStore, config.state_dir)
        except JobError as exc:
            raise MemgateError(str(exc)) from exc
        scheduler = Scheduler(store, clock, config.tz, config.automation.grace)
        job_tools = JobTools(scheduler, config.tz)
        skills = SkillCatalog(config.workspace)
        tools = ToolBox(
            config.workspace,
            config.state_dir,
            memory,
            memory_tools,
            offered.tools_by_scope() if offered is not None else {},
            private_tools=job_tools.tools(),
            scoped_tools=web_tools(config, pdf_bytes_text),
            **owner_tools(config),
            skills=skills,
        )
        if offered is not None:
            # No await since the box was built: a server that connects from now on is seen.
            watched = offered
            offered.on_change = lambda: tools.offer(watched.tools_by_scope())
        calibration = await asyncio.to_thread(
            TokenCalibration, token_calibration_path(config.state_dir), config.llm.model
        )
        budget = PromptBudget(config.llm.budget, counter, config.memory.fixed_share, calibration)
        summary_model.output = OutputLimit(
            config.llm.max_tokens,
            config.memory.max_memory_tokens,
            config.llm.context_window,
            budget.server_size,  # the context is the server's: its tokens, not our count
            bound=budget.server_at_most,
        )
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
            curator=update_curator(config),
        )
        transcriber = None
        if (speech := config.llm.transcription) is not None:
            transcriber = OnDemandTranscriber(lambda: make_transcriber(config, speech))
            stack.push_async_callback(transcriber.close)
        vision = getattr(provider, "vision_support", vision_support)
        media = MediaReader(config.workspace, config.media, budget, vision, transcriber)
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
            context=ContextBuilder(config.workspace, memory, config.tz, budget, skills=skills),
            keeper=consolidator,
            observer=metrics,
            budget=budget,
            media=media,
            jobs_command=job_tools.command,
        )
        stack.push_async_callback(agent.fitter.settle)  # what the last answers taught is kept
        consolidator.learnt = agent.fitter.settle  # a job sizes its calls with the ratio in force
        if config.agent.subagents.enabled:  # `spawn`; its tasks run under `memgate run`
            turn = SubagentTurn(
                provider=provider, sessions=sessions, tools=tools, context=agent.context,
                budget=budget, keeper=consolidator,
            )  # fmt: skip
            agent.subagents = Subagents(config.agent.subagents, config.state_dir, turn)
            tools.add_owner_tool(agent.subagents.tool())
        worker = group.create_task(consolidator.run(), name="consolidator")
        # Archival a previous process left unfinished is looked for beside the first replies:
        # after a year of /new the archive holds thousands of files.
        recovery = group.create_task(consolidator.recover(), name="archive recovery")

        async def stop_consolidation() -> None:
            # Runs before the task group exits: the running job gets its grace, the rest waits
            # for the next start (it is derived from the files).
            recovery.cancel()
            await consolidator.drain(config.shutdown_grace)
            worker.cancel()

        stack.push_async_callback(stop_consolidation)
        yield Runtime(
            config,
            memory,
            sessions,
            counter,
            provider,
            agent,
            consolidator,
            metrics,
            scheduler,
            mcp,
            search,
        )


def _gated_providers(
    config: Config, tool_support: ToolSupport, vision_support: VisionSupport
) -> tuple[GatedProvider, OnDemand[GatedProvider], ToolSupport]:
    """The agent's client and consolidation's (made by the first consolidation), each behind
    its endpoint's gate: replies ahead of consolidation where both ask one server.

    Two clients, two connection pools: a consolidation call held open for minutes never takes
    the warm connection a reply is about to need. One tool switch while both ask one model;
    memory.llm's own model learns its own.
    """
    llm, own = config.llm, config.consolidation_llm
    within = min(llm.timeout, PROFILE_TIMEOUT)
    gate = endpoint_gate(llm.base_url, llm.api_key, llm.max_concurrency, within)
    client = LazyProvider(llm.model, lambda: make_provider(config, tool_support, vision_support))
    chat = GatedProvider(client, gate, Priority.REPLY)
    same = own.base_url == llm.base_url and own.model == llm.model
    summary_tools = tool_support if same else ToolSupport(llm.tools)
    # Another server has its own gate, of the slots it says it has (memory.workers bounds it).
    background = (
        gate
        if own.base_url == llm.base_url
        else endpoint_gate(own.base_url, own.api_key, "auto", within)
    )
    summarizer = OnDemand(
        lambda: GatedProvider(
            LazyProvider(
                own.model, lambda: make_provider(config, summary_tools, vision_support, own)
            ),
            background,
            Priority.BACKGROUND,
        )
    )
    return chat, summarizer, summary_tools


def _start_mcp(
    config: Config, stack: AsyncExitStack, group: asyncio.TaskGroup, start: str
) -> tuple[McpServers | None, McpServers | OnDemandServers | None]:
    """The enabled MCP servers, connecting in the background (or on demand): the runtime's
    McpServers, and what offers their tools. None when there are none.

    Nothing waits for them: each offers the tools remembered from its last start at once.

    The MCP SDK takes longer to import than the rest of the gateway together, so a gateway
    without servers (and a one-shot chat none of whose servers starts) never imports it.
    """
    servers = config.tools.mcp_servers
    if not any(settings.enabled for settings in servers.values()):
        return None, None
    if start == "on demand":
        demand = OnDemandServers(servers, mcp_tools_path(config.state_dir), group)
        stack.push_async_callback(demand.stop)  # before the group exits: it waits for its tasks
        return None, demand
    from gateway.tools.mcp.servers import McpServers

    mcp = McpServers(servers, mcp_tools_path(config.state_dir), held=start == "held")
    stack.push_async_callback(mcp.stop)  # before the group exits: it waits for its tasks
    mcp.launch(group)
    return mcp, mcp
