"""The `exec` tool: a shell command for the owner, run in the sandbox, asked about first.

Offered only to the owner's own chats (their DMs and the terminal): never to a group or a guest,
whatever `memory.guests` or any other key says, and it checks the asking chat again when called.
Whether a command needs the owner's yes is `tools.exec.approve` with the `allow` patterns; the
decision is written into the tool's result, which the session stores with the turn.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import time
from pathlib import Path
from typing import Any, TypedDict

from gateway.config.models import Config
from gateway.config.tools import ExecConfig
from gateway.tools.approvals import Approvals, Decision
from gateway.tools.registry import Tool, ToolError, turn_origin
from gateway.tools.sandbox import Limits, Outcome, Sandbox, SandboxError, bwrap_path

log = logging.getLogger(__name__)

NAME = "exec"
OWNER_ONLY = "exec runs only in the owner's private chats"
# A command holding one of these is more than the one program a pattern names: it always asks.
_SHELL_SYNTAX = re.compile(r"[;&|`$<>\n\\(){}]")


def unavailable(settings: ExecConfig) -> str | None:
    """Why exec is not offered, or None when it is."""
    if not settings.enabled:
        return "off (tools.exec.enabled is false)"
    if settings.sandbox == "bwrap" and bwrap_path() is None:
        return "bwrap is not installed (Debian/Ubuntu: sudo apt install bubblewrap)"
    return None


def describe(settings: ExecConfig) -> str:
    """One line for `memgate status`: on or off, the sandbox, the approval mode."""
    reason = unavailable(settings)
    if reason is not None:
        return reason
    network = "network on" if settings.network else "no network"
    return f"on, sandbox {settings.sandbox} ({network}), approve {settings.approve}"


def needs_approval(command: str, settings: ExecConfig) -> bool:
    """Whether the owner is asked before `command` runs."""
    if settings.approve == "never":
        return False
    if settings.approve == "always":
        return True
    if _SHELL_SYNTAX.search(command):
        return True
    plain = " ".join(command.split())
    return not any(fnmatch.fnmatchcase(plain, pattern) for pattern in settings.allow)


class ExecTool:
    """`exec(command, timeout?)` for one workspace."""

    def __init__(
        self,
        settings: ExecConfig,
        workspace: Path,
        approvals: Approvals,
        hidden: tuple[Path, ...] = (),
    ) -> None:
        self.settings = settings
        self.approvals = approvals
        root = workspace.resolve()
        limits = settings.limits
        self.sandbox = Sandbox(
            root,
            hidden=tuple(p.resolve() for p in hidden if p.resolve().is_relative_to(root)),
            read_only=(root / "sessions", root / "memory" / "versions"),
            network=settings.network,
            limits=Limits(
                limits.cpu_seconds, limits.memory_mb, limits.processes, limits.output_chars
            ),
            isolated=settings.sandbox == "bwrap",
        )
        if not self.sandbox.isolated:
            log.warning(
                "exec runs commands WITHOUT a sandbox (tools.exec.sandbox: none): they reach "
                "everything memgate's user can, its state and config included"
            )

    def tool(self) -> Tool:
        return Tool(
            NAME,
            "Run a shell command (/bin/sh -c) in the workspace, in a sandbox: the workspace is "
            "the only writable folder, the system is read-only"
            + ("" if self.settings.network else ", there is no network")
            + f". Ends after {self.settings.timeout:g} s. Returns the exit status, stdout and "
            "stderr. The owner may be asked to approve it first.",
            {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "the shell command"},
                    "timeout": {
                        "type": "number",
                        "description": f"seconds, at most {self.settings.timeout:g}",
                    },
                },
                "required": ["command"],
            },
            self.run,
        )

    async def run(self, arguments: dict[str, Any]) -> str:
        origin = turn_origin.get()
        if origin is None or origin.is_group or not origin.sender_is_owner:
            raise ToolError(OWNER_ONLY)
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        timeout = self.settings.timeout
        asked = arguments.get("timeout")
        if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > 0:
            timeout = min(float(asked), timeout)
        approval = ""
        if needs_approval(command, self.settings):
            decision = await self.approvals.ask(origin, command)
            if decision is not Decision.APPROVED:
                return f"Not run: {decision.value}."
            approval = f"({decision.value})\n"
        started = time.monotonic()
        try:
            outcome = await self.sandbox.run(command, timeout)
        except SandboxError as exc:
            raise ToolError(str(exc)) from exc
        log.info(
            "exec ran session=%s status=%s seconds=%.1f sandbox=%s",
            origin.key,
            outcome.status,
            time.monotonic() - started,
            self.settings.sandbox,
        )
        return approval + render(outcome)


def render(outcome: Outcome) -> str:
    """The result the model reads."""
    status = outcome.note if outcome.status is None else f"exit status {outcome.status}"
    parts = [status]
    parts.append("stdout:\n" + outcome.stdout if outcome.stdout else "stdout: (empty)")
    if outcome.stderr:
        parts.append("stderr:\n" + outcome.stderr)
    return "\n".join(parts)


class OwnerTools(TypedDict):
    owner_tools: list[Tool]
    approvals: Approvals | None


def owner_tools(config: Config) -> OwnerTools:
    """The ToolBox's owner-only tools and their approvals, as `tools.exec` configures them:
    none when exec is off or its sandbox cannot run here (logged once, at start)."""
    settings = config.tools.exec
    reason = unavailable(settings)
    if reason is not None:
        if settings.enabled:
            log.warning("exec is not offered reason=%s", reason)
        return {"owner_tools": [], "approvals": None}
    approvals = Approvals(settings.approve_timeout)
    hidden = tuple(p for p in (config.source, config.state_dir) if p is not None)
    tool = ExecTool(settings, config.workspace, approvals, hidden=hidden)
    return {"owner_tools": [tool.tool()], "approvals": approvals}
