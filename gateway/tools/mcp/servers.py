"""Tools from MCP servers: each configured server kept connected, its tools offered as `<server>__<tool>`.

The SDK's side of a connection is client's (and stdio's), imported in a worker thread
when the first server starts: nothing on the way to the first reply loads the SDK. No start
waits for a server: each connects in the background, and the tools it listed at its last successful start with the same config
(cache) are offered at once; a call to one waits for the connection up to the server's
start_timeout. A server seen for the first time is offered once it has connected. A server that
fails to start is logged and left out; one that dies mid-session is restarted with backoff, and
its tools answer "unavailable" meanwhile. Nothing a server does can end a turn: every failure
becomes a short text for the model.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import random
import re
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.exceptions import best_match

from gateway.config.tools import McpServerConfig
from gateway.errors import describe_errors
from gateway.tools.mcp.cache import SEPARATOR, RemoteTool, ToolCache
from gateway.tools.registry import Tool, ToolError, ToolFunc

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import Tool as McpTool

    from gateway.tools.mcp.stdio import StdioTransport

log = logging.getLogger(__name__)

RESTART_FIRST_DELAY = 0.5  # seconds before the first restart of a server that died
RESTART_MAX_DELAY = 60.0
START_GIVE_UP_GRACE = 5.0  # seconds the SDK may take to stop a server that never answered
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-compatible APIs accept
STARTING, UP, RESTARTING, FAILED = "starting", "up", "restarting", "failed"


def offered_tools(
    server: str, listed: Iterable[McpTool], allow: list[str] | None
) -> list[RemoteTool]:
    """The listed tools the model may be offered: allowed, well named, with a valid object schema.

    A tool that fails a check is left out with a warning naming the server and the tool.
    """
    offered: list[RemoteTool] = []
    for tool in listed:
        if allow is not None and tool.name not in allow:
            continue
        qualified = f"{server}{SEPARATOR}{tool.name}"
        if not _FUNCTION_NAME.match(qualified):
            log.warning("mcp tool skipped: name unusable server=%s tool=%r", server, tool.name[:80])
            continue
        schema = tool.input_schema
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            log.warning(
                "mcp tool skipped: malformed schema server=%s tool=%s error=%s",
                server,
                tool.name,
                exc.message[:200],
            )
            continue
        if schema.get("type") != "object":
            log.warning(
                "mcp tool skipped: schema is not an object server=%s tool=%s", server, tool.name
            )
            continue
        offered.append(RemoteTool(server, tool.name, tool.description or "", dict(schema)))
    if allow is not None:
        for name in sorted(set(allow) - {tool.name for tool in offered}):
            log.warning("mcp tool in allow not offered server=%s tool=%s", server, name)
    return offered


class McpConnection:
    """One configured server, kept connected by `run()` until it is cancelled.

    `tools` is what the server is known to offer: the remembered list until the first start, then
    what that start listed, for the rest of the process (a restarted server serves the same
    names). `on_listed` is called once the first start has ended, up or failed.
    """

    def __init__(
        self, name: str, settings: McpServerConfig, remembered: list[RemoteTool] | None = None
    ) -> None:
        self.name = name
        self.settings = settings
        self.state = STARTING
        self.error = ""
        self.tools: list[RemoteTool] = remembered or []
        self.restarts = 0
        self.on_listed: Callable[[McpConnection], None] | None = None
        self.go: asyncio.Event | None = None  # set when it may start (McpServers.release)
        self._client: Client | None = None
        self._stdio: StdioTransport | None = None  # the process of a stdio server's latest start
        self._broken = asyncio.Event()
        self._started = asyncio.Event()  # the first start ended, up or failed
        self._changed = asyncio.Condition()
        self._validators = {t.name: Draft202012Validator(t.parameters) for t in self.tools}

    # -- lifecycle ---------------------------------------------------------------------------------
    async def run(self) -> None:
        """Start the server, then restart it with backoff whenever it dies; ends by cancellation."""
        if self.go is not None:
            await self.go.wait()
        # The SDK's import, seconds on a busy machine, in a worker thread: the event loop answers
        # meanwhile. Then `mcp_client` is only a lookup in sys.modules.
        await asyncio.to_thread(importlib.import_module, "gateway.tools.mcp.client")
        from gateway.tools.mcp import client as mcp_client

        delay = RESTART_FIRST_DELAY
        while True:
            self._broken.clear()
            try:
                async with AsyncExitStack() as stack:
                    async with asyncio.timeout(self.settings.start_timeout):
                        client, self._stdio = await mcp_client.connect(self.settings, stack)
                        listed = await mcp_client.list_tools(client)
                    if not self._started.is_set():
                        self.tools = offered_tools(self.name, listed, self.settings.allow)
                        self._validators = {
                            t.name: Draft202012Validator(t.parameters) for t in self.tools
                        }
                    self._client = client
                    await self._set_state(UP, "")
                    delay = RESTART_FIRST_DELAY
                    log.info("mcp server up server=%s tools=%d", self.name, len(self.tools))
                    await self._broken.wait()
            except Exception as exc:  # the server's supervisor: any failure is a restart later
                reason = (
                    f"no answer within {self.settings.start_timeout:g} s"
                    if isinstance(exc, TimeoutError)
                    else describe_errors(exc)
                )
                if not self._started.is_set():
                    await self._set_state(FAILED, reason)
                    log.warning(
                        "mcp server failed to start, skipped server=%s error=%s", self.name, reason
                    )
                    log.debug("mcp server start failure server=%s", self.name, exc_info=True)
                    return
                self.error = reason
            finally:
                self._client = None
            await self._set_state(RESTARTING, self.error or "the connection closed")
            wait = delay * random.uniform(0.8, 1.2)  # jitter: several servers do not retry in step
            log.warning(
                "mcp server down, restarting server=%s in=%.1fs reason=%s",
                self.name,
                wait,
                self.error or "the connection closed",
            )
            await asyncio.sleep(wait)
            delay = min(delay * 2, RESTART_MAX_DELAY)
            self.restarts += 1

    async def _set_state(self, state: str, error: str) -> None:
        self.state, self.error = state, error
        if state in (UP, FAILED) and not self._started.is_set():
            self._started.set()
            if self.on_listed is not None:
                self.on_listed(self)
        async with self._changed:
            self._changed.notify_all()

    async def started(self) -> None:
        """Wait for the first start to end, up or failed (bounded by the start timeout)."""
        await self._started.wait()

    async def wait_for(self, state: str) -> None:
        """Wait until the server is in `state` (tests and doctor use it)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.state == state)

    # -- calls ---------------------------------------------------------------------------------------
    async def call(self, tool: RemoteTool, arguments: dict[str, Any]) -> str:
        """Call one tool; timeouts, a dead server and protocol errors become ToolError.

        Before the first start has ended (a remembered tool) the call waits for it. A server still
        held (memgate run lets them start once it is idle) is let go at once: a tool is wanted.
        """
        if self.go is not None:
            self.go.set()
        if not self._started.is_set():
            try:
                # `run()` gives up at start_timeout, then takes a stopped server's grace to say so.
                async with asyncio.timeout(self.settings.start_timeout + START_GIVE_UP_GRACE):
                    await self._started.wait()
            except TimeoutError:
                raise ToolError(self._unavailable()) from None
        validator = self._validators.get(tool.name)
        if validator is None:  # remembered, but the server no longer lists it
            raise ToolError(f"the MCP server {self.name!r} no longer offers {tool.name!r}")
        errors = validator.iter_errors(arguments)
        problem = best_match(errors)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "arguments"
            raise ToolError(f"{where}: {problem.message[:300]}")
        client = self._client
        if client is None or self.state != UP:
            raise ToolError(self._unavailable())
        if self._stdio is not None:  # it has worked for us: it may have something to finish
            self._stdio.used()
        from gateway.tools.mcp import (
            client as mcp_client,  # loaded by `run()` before `_client` was set
        )

        try:
            async with asyncio.timeout(self.settings.timeout):
                return await mcp_client.call_tool(client, tool.name, arguments, tool.qualified)
        except TimeoutError:
            log.warning(
                "mcp tool timed out tool=%s timeout=%gs", tool.qualified, self.settings.timeout
            )
            raise ToolError(
                f"{tool.qualified} timed out after {self.settings.timeout:g} s"
            ) from None
        except ToolError:
            raise  # the server refused the call and said why
        except ConnectionError as exc:  # its connection closed under the call
            self._lost(str(exc))
            raise ToolError(self._unavailable()) from None
        except Exception as exc:  # a transport failure: the server is gone or unreachable
            self._lost(describe_errors(exc))
            raise ToolError(self._unavailable()) from None

    def _lost(self, reason: str) -> None:
        """Called by the call that found the server gone: `run()` restarts it."""
        if self._client is not None:
            # Set at once: the calls that come before `run()` wakes up see it down too.
            self.state, self.error = RESTARTING, reason
            self._client = None
            self._broken.set()

    def _unavailable(self) -> str:
        if self.state == FAILED:
            return f"the MCP server {self.name!r} is unavailable right now ({self.error}); it did not start"
        if self.state == STARTING:
            return (
                f"the MCP server {self.name!r} is unavailable right now "
                f"(no answer within {self.settings.start_timeout:g} s); it did not start"
            )
        return (
            f"the MCP server {self.name!r} is unavailable right now "
            f"({self.error or self.state}); memgate is restarting it, try again later"
        )


class McpServers:
    """Every enabled server of `tools.mcp_servers`, and their tools for each scope.

    With a `cache` path, each server's remembered tools are offered before it connects, and what
    it lists once connected is remembered for the next start. `on_change` is called whenever a
    server's offered tools may have changed (its first start ended).
    """

    def __init__(
        self,
        servers: dict[str, McpServerConfig],
        cache: Path | ToolCache | None = None,
        *,
        held: bool = False,
    ) -> None:
        self._cache = ToolCache(cache) if isinstance(cache, Path) else cache
        self.connections = [
            McpConnection(n, s, self._remembered(n, s)) for n, s in servers.items() if s.enabled
        ]
        # Held (memgate run), launched servers wait for `release()` before anything, the SDK's
        # import included: that import would take the interpreter from the channels' start.
        self._go = asyncio.Event()
        if not held:
            self._go.set()
        for connection in self.connections:
            connection.on_listed = self._listed
            connection.go = self._go
        self.disabled = [name for name, settings in servers.items() if not settings.enabled]
        self.on_change: Callable[[], None] | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def _remembered(self, name: str, settings: McpServerConfig) -> list[RemoteTool]:
        entries = self._cache.load(name, settings) if self._cache is not None else None
        if not entries:
            return []
        try:
            return [RemoteTool(server=name, **entry) for entry in entries]
        except TypeError:  # a cache written by another version: the server is listed afresh
            return []

    def _listed(self, connection: McpConnection) -> None:
        if self._cache is not None and connection.state == UP:
            remembered = [asdict(t) for t in connection.tools]
            for entry in remembered:
                del entry["server"]  # the key already names it
            self._cache.save(connection.name, connection.settings, remembered)
        elif self._cache is not None:
            self._cache.save_failure(connection.name, connection.settings, connection.error)
        if self.on_change is not None:
            self.on_change()

    def launch(self, group: asyncio.TaskGroup) -> None:
        """Start every server in the background, in `group`; returns at once."""
        if self._tasks:
            raise RuntimeError("the MCP servers are already started")
        self._tasks = [group.create_task(c.run(), name=f"mcp:{c.name}") for c in self.connections]

    def release(self) -> None:
        """Let held servers start."""
        self._go.set()

    @property
    def released(self) -> bool:
        return self._go.is_set()

    async def start(self, group: asyncio.TaskGroup) -> None:
        """Start every server in parallel in `group`; return once each is up or has failed.

        Each start is bounded by its server's `start_timeout`, so this is too.
        """
        self.launch(group)
        await self.started()

    async def started(self) -> None:
        """Wait until every server's first start has ended, up or failed."""
        await asyncio.gather(*(c.started() for c in self.connections))

    async def stop(self) -> None:
        """Close every connection (a stdio server's process is ended by the SDK)."""
        for task in self._tasks:
            task.cancel()
        ended = await asyncio.gather(*self._tasks, return_exceptions=True)
        for task, result in zip(self._tasks, ended, strict=True):
            if isinstance(result, Exception):  # stopping anyway: worth a line, not a failure
                log.debug("mcp stopped with an error task=%s error=%s", task.get_name(), result)

    def connection(self, name: str) -> McpConnection:
        return next(c for c in self.connections if c.name == name)

    def tools_by_scope(self) -> dict[str, list[Tool]]:
        """Each scope name's tools, as the tool registry takes them."""
        by_scope: dict[str, list[Tool]] = {}
        for connection in self.connections:
            if connection.state == FAILED:
                continue  # its remembered tools would only ever answer "unavailable"
            for remote in connection.tools:
                tool = Tool(
                    remote.qualified,
                    remote.description,
                    remote.parameters,
                    _caller(connection, remote),
                )
                for scope in connection.settings.scopes:
                    by_scope.setdefault(scope, []).append(tool)
        return by_scope

    def up(self) -> list[McpConnection]:
        return [c for c in self.connections if c.state == UP]


def _caller(connection: McpConnection, remote: RemoteTool) -> ToolFunc:
    async def run(arguments: dict[str, Any]) -> str:
        return await connection.call(remote, arguments)

    return run


async def probe(name: str, settings: McpServerConfig) -> McpConnection:
    """Start one server, list its tools and stop it again (for `memgate doctor`)."""
    servers = McpServers({name: settings})
    async with asyncio.TaskGroup() as group:
        await servers.start(group)
        await servers.stop()
    return servers.connection(name)
