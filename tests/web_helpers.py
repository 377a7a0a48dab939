"""What the web tool tests share: the tools as `tools.web` builds them, called as the model calls
them (through a registry)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.media.documents import pdf_bytes_text
from gateway.tools.registry import ToolRegistry
from gateway.tools.web.guard import Resolver
from gateway.tools.web.tools import web_tools
from tests.conftest import build_config

UNUSED_LLM = "http://127.0.0.1:9/v1"  # these tests call the tools, never the model


def web_registry(
    tmp_path: Path, web: dict[str, Any], resolver: Resolver | None = None, **overrides: Any
) -> ToolRegistry:
    """The private scope's web tools, as `tools.web: web` (and other keys) configure them."""
    config = build_config(tmp_path / "workspace", UNUSED_LLM, {"tools": {"web": web}, **overrides})
    registry = ToolRegistry()
    for tool in web_tools(config, pdf_bytes_text, resolver).get("private", []):
        registry.add(tool)
    return registry


async def call(registry: ToolRegistry, name: str, **arguments: Any) -> str:
    """A tool's result as the model would read it."""
    return await registry.execute(name, json.dumps(arguments))
