"""MCP servers for a one-shot `memgate chat -m`: a server none of whose tools is called costs
nothing, neither its process nor the SDK's import (which alone takes longer than the chat).

The tools a server listed at its last start (cache) are offered as they are; the first call to
one starts that server (the SDK loads then) and waits for it, as any call before a first start
does. A server with nothing remembered is started at once, in the background, and the stop
waits for that first start to end (bounded by its start_timeout) so that the next chat knows its
tools: a new or changed server costs one chat that wait, once. A server whose last start with this
config failed, and that never listed tools, is not started here: `memgate run` and the
interactive chat start every server and remember how it went.

Imports nothing of the SDK, and gateway.tools.mcp.servers (jsonschema's validators) only when a server
starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.config.tools import McpServerConfig
from gateway.tools.mcp.cache import RemoteTool, ToolCache
from gateway.tools.registry import Tool, ToolFunc

if TYPE_CHECKING:
    from gateway.tools.mcp.servers import McpServers

log = logging.getLogger(__name__)


class OnDemandServers:
    """The enabled servers of `tools.mcp_servers`, each started by the first call to its tools
    (or at once when nothing of it is remembered); the same `tools_by_scope`, `on_change` and
    `stop()` as McpServers."""

    def __init__(
        self, servers: dict[str, McpServerConfig], cache: Path, group: asyncio.TaskGroup
    ) -> None:
        self._cache = ToolCache(cache)
        self._group = group
        self._settings = {name: s for name, s in servers.items() if s.enabled}
        self._remembered: dict[str, list[RemoteTool]] = {}
        fresh: dict[str, McpServerConfig] = {}
        for name, settings in self._settings.items():
            entries = self._cache.load(name, settings)
            if entries is None:
                fresh[name] = settings
                continue
            if not entries and self._cache.failed(name, settings):
                log.info("mcp server not started: its last start failed server=%s", name)
            try:
                self._remembered[name] = [RemoteTool(server=name, **entry) for entry in entries]
            except TypeError:  # a cache written by another version: learnt afresh
                fresh[name] = settings
        self._started: dict[str, McpServers] = {}
        self._starting = asyncio.Lock()
        self.on_change: Callable[[], None] | None = None
        self._fresh = self._launch(fresh) if fresh else None

    def _launch(self, servers: dict[str, McpServerConfig]) -> McpServers:
        from gateway.tools.mcp.servers import McpServers  # only for a server that starts

        launched = McpServers(servers, self._cache)
        launched.on_change = self._changed
        launched.launch(self._group)
        return launched

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def _server(self, name: str) -> McpServers:
        """The server `name`, started by the first call that needs it."""
        async with self._starting:
            started = self._started.get(name)
            if started is None:
                log.info("mcp server started for a call server=%s", name)
                started = self._started[name] = self._launch({name: self._settings[name]})
        return started

    def tools_by_scope(self) -> dict[str, list[Tool]]:
        """Each scope name's tools: the remembered ones, and those of servers started since."""
        by_scope: dict[str, list[Tool]] = {}
        for name, remembered in self._remembered.items():
            for remote in remembered:
                tool = Tool(
                    remote.qualified, remote.description, remote.parameters, self._caller(remote)
                )
                for scope in self._settings[name].scopes:
                    by_scope.setdefault(scope, []).append(tool)
        if self._fresh is not None:
            for name, tools in self._fresh.tools_by_scope().items():
                by_scope.setdefault(name, []).extend(tools)
        return by_scope

    def _caller(self, remote: RemoteTool) -> ToolFunc:
        async def run(arguments: dict[str, Any]) -> str:
            started = await self._server(remote.server)
            return await started.connection(remote.server).call(remote, arguments)

        return run

    async def stop(self) -> None:
        """Let the new servers' first start end (each bounded by its start_timeout), so what they
        list is remembered; then stop every server started."""
        if self._fresh is not None:
            await self._fresh.started()
            await self._fresh.stop()
        for started in self._started.values():
            await started.stop()
