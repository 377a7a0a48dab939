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
from gateway.errors import ConfigError, LLMError, LLMToolsUnsupportedError, WorkspaceLockedError
from gateway.llm.provider import OpenAIEmbedder, OpenAIProvider
from gateway.llm.types import ToolSupport
from gateway.service.control import request, socket_path
from gateway.service.lock import WorkspaceLock
from gateway.tools.mcp import UP, probe
from memory.errors import EmbeddingError

MIN_FREE_BYTES = 200 * 1024 * 1024  # sessions, media and the search index grow from here

# A tool the model may or may not call: offered only to learn whether tools are accepted.
_PING_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Does nothing.",
        "parameters": {"type": "object", "properties": {}},
    },
}


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
    llm = config.llm
    try:
        require_api_key(config)
    except ConfigError as exc:
        return Check("llm", False, str(exc))
    support = ToolSupport("on")
    provider = OpenAIProvider(
        base_url=llm.base_url,
        api_key=llm.api_key,
        model=llm.model,
        timeout=llm.timeout,
        max_retries=0,
        max_tokens=16,
        tool_support=support,
    )
    asked = [{"role": "user", "content": "Reply with the word OK."}]
    try:
        try:
            await provider.chat(asked, [_PING_TOOL])
            tools = "tools supported"
        except LLMToolsUnsupportedError:
            await provider.chat(asked)
            tools = "tools NOT supported (keep llm.tools: auto, or set it to off)"
    except LLMError as exc:
        return Check("llm", False, exc.cause)
    finally:
        await provider.close()
    return Check("llm", True, f"model {llm.model!r} at {provider.endpoint} answers; {tools}")


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
