"""The `tools` section: MCP servers and the sandboxed shell (`exec`); the web tools' keys are
gateway/config/web.py's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from gateway.config.fields import SECTION, http_url
from gateway.config.web import WebConfig


class _Section(BaseModel):
    # The string under each field is its meaning in docs/configuration.md (gateway/config/reference.py
    # reads it from this source; pydantic's own reading costs every start ~50 ms).
    model_config = SECTION


_SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")


class McpServerConfig(_Section):
    """One MCP server: a command run over stdio, or a streamable HTTP URL."""

    command: str | None = None
    """stdio: the program to run (e.g. npx, uvx, python); give this or url."""
    args: list[str] = []
    """stdio: its arguments."""
    env: dict[str, str] = {}
    """stdio: its environment variables; of memgate's own it gets only HOME, LOGNAME, PATH, SHELL, TERM and USER (values are treated as secrets)."""
    cwd: Path | None = None
    """stdio: the folder it runs in; null: memgate's own."""
    url: str | None = None
    """Streamable HTTP: the server's endpoint, e.g. http://127.0.0.1:8000/mcp; give this or command."""
    headers: dict[str, str] = {}
    """HTTP: headers sent with every request, e.g. Authorization (values are treated as secrets)."""
    enabled: bool = True
    """false: keep the entry but do not start the server."""
    timeout: float = Field(30, gt=0, le=3600)
    """Seconds one tool call may take; past it the model is told the call timed out."""
    start_timeout: float = Field(20, gt=0, le=600)
    """Seconds the server gets to start and list its tools; past it memgate runs without it."""
    scopes: list[Literal["private", "group"]] = ["private"]
    """Chats offered its tools: private (the owner's DMs and the terminal) and/or group (groups and guests)."""
    allow: list[str] | None = None
    """Tool names (the server's own, without the prefix) to offer; null: all of them."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)

    @field_validator("cwd", mode="after")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP), not both")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd belong to a command server, not a url one")
        if self.command is not None and self.headers:
            raise ValueError("headers belong to a url server, not a command one")
        return self


class ExecLimitsConfig(_Section):
    """What one command may use; past a limit the kernel stops it."""

    cpu_seconds: int = Field(60, gt=0, le=86400)
    """CPU seconds per process."""
    memory_mb: int = Field(1024, ge=64)
    """Address space per process, in MB."""
    processes: int = Field(64, ge=4, le=4096)
    """Processes (and threads) the command may have at once (a fork bomb stops here)."""
    output_chars: int = Field(16_000, ge=1000, le=200_000)
    """Characters of stdout and of stderr kept for the model; past it the command is stopped."""


class ExecConfig(_Section):
    """`exec`: shell commands for the owner (their DMs and the terminal only, never a group or a guest)."""

    enabled: bool = False
    """true: offer the `exec` tool to the owner's chats."""
    sandbox: Literal["bwrap", "none"] = "bwrap"
    """bwrap: each command in bubblewrap, seeing the workspace and the system read-only; none: run without it (logged as a warning; the command reaches all memgate's user can)."""
    network: bool = False
    """true: commands may use the network; false: they have none (not even loopback)."""
    timeout: float = Field(60, gt=0, le=3600)
    """Seconds a command may run (the model may ask for less); then its whole process tree is killed."""
    limits: ExecLimitsConfig = ExecLimitsConfig()
    """CPU, memory, processes and output of each command."""
    approve: Literal["always", "unlisted", "never"] = "unlisted"
    """always: the owner approves every command in the chat; unlisted: all but those matching allow; never: none is asked."""
    allow: list[str] = []
    """Commands that run without asking, as shell patterns (`ls *`, `df -h`); one holding ; & | ` $ < > or a newline always asks."""
    approve_timeout: float = Field(300, gt=0, le=86400)
    """Seconds the owner has to answer /approve or /deny; then the command is refused."""


class ToolsConfig(_Section):
    mcp_servers: dict[str, McpServerConfig] = {}
    """MCP servers whose tools the model may call, by name; each tool is offered as `<name>__<tool>`."""
    exec: ExecConfig = ExecConfig()
    """Shell commands for the owner, in a sandbox, with approval."""
    web: WebConfig = WebConfig()
    """Reading web pages (web_fetch) and searching the web (web_search), guarded against your own network."""

    @field_validator("mcp_servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            if not _SERVER_NAME.match(name) or len(name) > 32:
                raise ValueError(
                    f"server name {name!r} must be 1-32 letters, digits, - or single _"
                )
        return value
