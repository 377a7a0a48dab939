"""The MCP tool lists remembered from each server's last successful start (STATE/mcp-tools.json).

Each entry is keyed by the server's name and a hash of its whole config, so a changed command,
env, URL, header or allow list is never offered the old server's tools. The file holds the hash,
never the config: env and header values are secrets. A start that failed is remembered too (the
tools of the last good start kept): a one-shot chat does not start such a server again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config.tools import McpServerConfig
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

VERSION = 1
SEPARATOR = "__"


@dataclass(frozen=True)
class RemoteTool:
    """One tool a server offers, as the model will see it."""

    server: str
    name: str
    description: str
    parameters: dict[str, Any]

    @property
    def qualified(self) -> str:
        return f"{self.server}{SEPARATOR}{self.name}"


def config_key(settings: McpServerConfig) -> str:
    """A hash of everything configured for one server: any change gives another key."""
    blob = json.dumps(settings.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ToolCache:
    """The remembered tool lists, read once at start and rewritten whole after each connect."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._servers: dict[str, dict[str, Any]] = self._read()

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # unreadable: every server is offered once it connects
            log.warning("mcp tool cache ignored path=%s error=%s", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return {}
        servers = data.get("servers")
        if not isinstance(servers, dict):
            return {}
        return {name: entry for name, entry in servers.items() if isinstance(entry, dict)}

    def load(self, name: str, settings: McpServerConfig) -> list[dict[str, Any]] | None:
        """The tools `name` listed last time with this very config, or None."""
        entry = self._servers.get(name)
        if entry is None or entry.get("key") != config_key(settings):
            return None
        tools = entry.get("tools")
        if not isinstance(tools, list):
            return None
        return [t for t in tools if isinstance(t, dict)]

    def failed(self, name: str, settings: McpServerConfig) -> bool:
        """Whether the last start of `name` with this very config failed."""
        entry = self._servers.get(name)
        return entry is not None and entry.get("key") == config_key(settings) and "failed" in entry

    def save(self, name: str, settings: McpServerConfig, tools: list[dict[str, Any]]) -> None:
        """Remember what `name` listed; a write that fails costs only the next start's head start."""
        self._servers[name] = {"key": config_key(settings), "tools": tools}
        self._write()

    def save_failure(self, name: str, settings: McpServerConfig, error: str) -> None:
        """Remember that `name` failed to start, keeping the tools of its last good start."""
        self._servers[name] = {
            "key": config_key(settings),
            "tools": self.load(name, settings) or [],
            "failed": error,
        }
        self._write()

    def _write(self) -> None:
        text = json.dumps({"version": VERSION, "servers": self._servers}, ensure_ascii=False)
        try:
            atomic_write(self.path, text)
        except OSError as exc:
            log.warning("mcp tool cache not written path=%s error=%s", self.path, exc)
