"""`memgate doctor`: live checks of everything a first start depends on, one line each.

Each check gives ✓ or ✗ and, when it fails, what to change. Unlike `memgate status` (offline and
fast), these calls reach the model, the embeddings endpoint, the chat platforms and the MCP
servers (each started, asked for its tools and stopped).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channels.base import ChannelConfigError
from channels.discord.connect import probe_discord
from channels.telegram.connect import probe_telegram
from gateway.config.file import require_api_key
from gateway.config.models import Config, McpServerConfig
from gateway.errors import (
    ConfigError,
    LLMError,
    LLMStatusError,
    LLMToolsUnsupportedError,
    WorkspaceLockedError,
)
from gateway.llm.provider import OpenAIEmbedder, OpenAIProvider
from gateway.llm.types import ChatResponse, ToolSupport
from gateway.service.control import request, socket_path
from gateway.service.lock import WorkspaceLock
from gateway.tools.mcp import UP, probe
from memory.errors import EmbeddingError

MIN_FREE_BYTES = 200 * 1024 * 1024  # sessions, media and the search index grow from here

PROBE_TOKENS = 64  # room for a tool call (and a little thinking), few enough to come back quickly

# Offered with every model request of the check: once as the agent offers tools (the model may
# call it or not), once forced by `tool_choice`, which a server that supports tools must honour.
_PING_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Does nothing.",
        "parameters": {"type": "object", "properties": {}},
    },
}
_FORCE_PING = {"type": "function", "function": {"name": "ping"}}
_ASKED = [{"role": "user", "content": "Reply with the word OK."}]
_TOLD = [{"role": "user", "content": "Call the ping tool."}]
TOOLS_IGNORED = (
    "tools ignored: the server answered text to a forced tool call; "
    "consolidation will use plain-text JSON mode"
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'✓' if self.ok else '✗'} {self.name}: {self.detail}"


async def run_checks(config: Config) -> AsyncIterator[Check]:
    """Every check in order; each runs even when an earlier one failed."""
    for name, folder in (("workspace", config.workspace), ("state", config.state_dir)):
        yield check_folder(name, folder)
    yield await check_lock(config)
    yield await check_llm(config)
    if config.memory.embeddings is not None:
        yield await check_embeddings(config)
    telegram, discord = config.channels.telegram, config.channels.discord
    if telegram.enabled:
        yield await check_channel(
            "telegram", probe_telegram(token=telegram.token, base_url=telegram.base_url)
        )
    if discord.enabled:
        yield await check_channel(
            "discord", probe_discord(token=discord.token, api_base=discord.api_base)
        )
    for name, server in config.tools.mcp_servers.items():
        yield await check_mcp(name, server)
    yield check_disk(config.workspace)


async def check_channel(name: str, probe: Awaitable[str]) -> Check:
    """A chat platform's live probe: what it found, or why it refused the settings."""
    try:
        return Check(name, True, await probe)
    except ChannelConfigError as exc:
        return Check(name, False, str(exc))


def check_folder(name: str, folder: Path) -> Check:
    if not folder.exists():
        return Check(name, True, f"{folder} will be created (mode 0700) at the first start")
    mode = stat.S_IMODE(folder.stat().st_mode)
    if not os.access(folder, os.W_OK | os.X_OK):
        return Check(
            name, False, f"{folder} is not writable by you (fix: sudo chown -R $USER {folder})"
        )
    if mode & 0o077:
        return Check(
            name,
            False,
            f"{folder} has mode {mode:04o}, readable by others (fix: chmod 700 {folder})",
        )
    return Check(name, True, f"{folder} writable, owner-only ({mode:04o})")


async def check_lock(config: Config) -> Check:
    lock = WorkspaceLock(config.workspace, config.state_dir)
    if not config.workspace.exists():
        return Check("lock", True, "free")
    try:
        lock.acquire()
    except WorkspaceLockedError as exc:
        live = await request(socket_path(config.state_dir), {"op": "status"})
        running = "the service answers on its control socket" if live else "no control socket"
        return Check("lock", True, f"{exc.args[0].split(';')[0]} ({running})")
    lock.release()
    return Check("lock", True, "free (no memgate is running on this workspace)")


async def check_llm(config: Config) -> Check:
    """The model answers a request as the agent sends it, and a call forced to a tool comes back
    as that tool's call. `memgate setup` tests its answers with it."""
    llm = config.llm
    try:
        require_api_key(config)
    except ConfigError as exc:
        return Check("llm", False, str(exc))
    provider = OpenAIProvider(
        base_url=llm.base_url,
        api_key=llm.api_key,
        model=llm.model,
        timeout=llm.timeout,
        max_retries=0,
        max_tokens=PROBE_TOKENS,
        tool_support=ToolSupport("on"),
    )
    try:
        return await _probe_llm(provider)
    finally:
        await provider.close()


async def _probe_llm(provider: OpenAIProvider) -> Check:
    """The agent's request first (tools offered), then the forced one; one at a time, as a local
    server with one slot would take them anyway."""
    plain = await _attempt(provider.chat(_ASKED, [_PING_TOOL]))
    if isinstance(plain, LLMToolsUnsupportedError):
        bare = await _attempt(provider.chat(_ASKED))
        if isinstance(bare, LLMError):
            return Check("llm", False, bare.cause)
        ok, tools = True, "tools NOT supported (keep llm.tools: auto, or set it to off)"
    elif isinstance(plain, LLMError):
        return Check("llm", False, plain.cause)
    else:
        forced = await _attempt(provider.chat(_TOLD, [_PING_TOOL], tool_choice=_FORCE_PING))
        ok, tools = _forced_verdict(forced)
    return Check("llm", ok, f"model {provider.model!r} at {provider.endpoint} answers; {tools}")


async def _attempt(call: Awaitable[ChatResponse]) -> ChatResponse | LLMError:
    """The answer, or the model's error."""
    try:
        return await call
    except LLMError as exc:
        return exc


def _forced_verdict(forced: ChatResponse | LLMError) -> tuple[bool, str]:
    """What the answer to the forced call says of tool calling: (passes, what to print)."""
    if isinstance(forced, LLMError):
        refused = isinstance(forced, LLMStatusError) and forced.status in (400, 422)
        if refused and "tool_choice" in str(forced):
            return True, "tools supported; forcing one is refused, so consolidation asks with auto"
        return False, f"a forced tool call failed: {forced.cause}"
    if forced.tool_calls:
        return True, "tools supported"
    if forced.finish_reason == "length":
        return True, f"tools unclear: the answer to a forced tool call passed {PROBE_TOKENS} tokens"
    return True, TOOLS_IGNORED


async def check_embeddings(config: Config) -> Check:
    settings = config.memory.embeddings
    assert settings is not None
    embedder = OpenAIEmbedder(
        base_url=settings.base_url,
        api_key=settings.api_key,
        model=settings.model,
        timeout=settings.timeout,
    )
    try:
        [vector] = await embedder.embed(["ping"])
    except (EmbeddingError, ValueError) as exc:
        return Check(
            "embeddings",
            False,
            f"{exc} (memory.embeddings.base_url / .model / .api_key; search falls back to keywords)",
        )
    finally:
        await embedder.close()
    return Check("embeddings", True, f"model {settings.model!r} answers ({len(vector)} dimensions)")


async def check_mcp(name: str, settings: McpServerConfig) -> Check:
    """Start the server as `memgate run` would: its state, and the tools the model would get."""
    label = f"mcp {name}"
    if not settings.enabled:
        return Check(label, True, f"disabled (tools.mcp_servers.{name}.enabled)")
    connection = await probe(name, settings)
    if connection.state != UP:
        return Check(
            label,
            False,
            f"failed to start: {connection.error} "
            f"(tools.mcp_servers.{name}.command / .url; memgate runs without it)",
        )
    tools = ", ".join(tool.qualified for tool in connection.tools) or "none"
    scopes = "+".join(settings.scopes)
    return Check(label, True, f"up; {len(connection.tools)} tool(s) for {scopes}: {tools}")


def check_disk(workspace: Path) -> Check:
    where = workspace
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    shown = f"{free / 1024**3:.1f} GiB free on {where}"
    if free < MIN_FREE_BYTES:
        return Check("disk", False, f"only {shown}: free some space")
    return Check("disk", True, shown)
