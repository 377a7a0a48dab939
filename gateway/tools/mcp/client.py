"""The MCP SDK's side of a server connection: connect, list its tools, call one, render the result.

With stdio, the only modules that use the `mcp` SDK (and the httpx2 its HTTP transport runs
on) at run time. gateway/tools/mcp/servers.py imports this module in a worker thread when a server first
starts, never on the way to the first reply: the SDK's import takes longer than the rest of
memgate's start.
"""

from __future__ import annotations

import json
import logging
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CONNECTION_CLOSED,
    AudioContent,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from mcp.types import Tool as McpTool

from gateway.config.tools import McpServerConfig
from gateway.tools.mcp.stdio import StdioTransport
from gateway.tools.registry import ToolError

log = logging.getLogger(__name__)

# What the model sees of one result, marker included: no more than a session keeps of any result.
MAX_RESULT_CHARS = 16_000
MAX_TOOL_PAGES = 20  # a server whose tool list never ends cannot hold the start up forever


async def connect(
    settings: McpServerConfig, stack: AsyncExitStack
) -> tuple[Client, StdioTransport | None]:
    """A connected client of the server (closed by `stack`), and a stdio server's transport."""
    if settings.url is not None:
        # The transport leaves a client it was given open: the stack closes it, last.
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=settings.headers,
                timeout=httpx2.Timeout(30.0, read=max(300.0, settings.timeout)),
            )
        )
        client = Client(streamable_http_client(settings.url, http_client=http))
        return await stack.enter_async_context(client), None
    assert settings.command is not None  # the config allows one of command or url
    stdio = StdioTransport(settings.command, settings.args, settings.env, settings.cwd)
    return await stack.enter_async_context(Client(stdio.open())), stdio


async def list_tools(client: Client) -> list[McpTool]:
    """Every tool the server lists, page by page (MAX_TOOL_PAGES at most)."""
    listed: list[McpTool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return listed


async def call_tool(client: Client, name: str, arguments: dict[str, Any], qualified: str) -> str:
    """The tool's result as text. A refusal is a ToolError saying why; a closed connection a
    ConnectionError."""
    try:
        result = await client.call_tool(name, arguments)
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            raise ConnectionError("the connection closed") from exc
        log.info("mcp tool refused tool=%s error=%s", qualified, exc.message[:200])
        raise ToolError(f"{qualified}: {exc.message[:500]}") from None
    return render_result(result, qualified)


def render_result(result: CallToolResult, qualified: str) -> str:
    """A tool result as text: text blocks as they are, other content named, capped."""
    parts = [_render_block(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if result.is_error:
        text = f"Error: {qualified} reported a failure: {text or '(no details)'}"
    if len(text) > MAX_RESULT_CHARS:
        keep = MAX_RESULT_CHARS - 80  # room for the marker
        marker = f"\n[... {len(text) - keep} of {len(text)} characters cut: results are capped]"
        text = text[:keep] + marker
    return text or "(the tool returned nothing)"


def _render_block(block: ContentBlock) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent):
        return f"[image content ({block.mime_type}) not shown]"
    if isinstance(block, AudioContent):
        return f"[audio content ({block.mime_type}) not shown]"
    if isinstance(block, ResourceLink):
        return f"[resource link: {block.uri}]"
    if isinstance(block, EmbeddedResource):
        if isinstance(block.resource, TextResourceContents):
            return block.resource.text
        kind = block.resource.mime_type or "binary"
        return f"[embedded resource {block.resource.uri} ({kind}) not shown]"
    return f"[{getattr(block, 'type', 'unknown')} content not shown]"
