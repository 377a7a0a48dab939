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

from gateway.agent import AgentLoop
from gateway.config import Config
from gateway.context import ContextBuilder
from gateway.provider import ChatProvider, OpenAIProvider
from gateway.tools import ToolRegistry, WorkspaceFiles
from memory.files import MemoryFiles
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


def ensure_workspace(config: Config) -> MemoryFiles:
    workspace = config.workspace
    for sub in ("memory", "sessions", "media"):
        (workspace / sub).mkdir(parents=True, exist_ok=True)
    memory = MemoryFiles(workspace, config.tz)
    memory.ensure()
    return memory


@asynccontextmanager
async def open_runtime(
    config: Config, provider: ChatProvider | None = None
) -> AsyncIterator[Runtime]:
    """Build the runtime; resources close in reverse order on exit."""
    async with AsyncExitStack() as stack:
        memory = await asyncio.to_thread(ensure_workspace, config)
        counter = await asyncio.to_thread(TokenCounter, config.llm.model)
        if provider is None:
            openai_provider = OpenAIProvider(
                base_url=config.llm.base_url,
                api_key=config.llm.api_key,
                model=config.llm.model,
                timeout=config.llm.timeout,
                max_retries=config.llm.max_retries,
                temperature=config.llm.temperature,
                max_tokens=config.llm.max_tokens,
            )
            stack.push_async_callback(openai_provider.close)
            provider = openai_provider
        sessions = SessionStore(config.workspace / "sessions", config.tz)
        tools = ToolRegistry()
        for tool in WorkspaceFiles(config.workspace).tools():
            tools.add(tool)
        agent = AgentLoop(
            config=config,
            provider=provider,
            sessions=sessions,
            memory=memory,
            counter=counter,
            tools=tools,
            context=ContextBuilder(config.workspace, memory, config.tz),
        )
        yield Runtime(config, memory, sessions, counter, provider, agent)
