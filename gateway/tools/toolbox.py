"""Each scope's tools: the file tools confined to its roots, and the extras its scope is offered."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gateway.skills.catalog import SkillCatalog
from gateway.tools.approvals import Approvals
from gateway.tools.files import WorkspaceFiles
from gateway.tools.registry import Tool, ToolRegistry
from gateway.tools.scope import GROUP, PRIVATE, Scope, ScopeGuard
from gateway.tools.skill_files import SkillFiles
from memory.files import MemoryFiles


class ToolBox:
    """Each scope's tools: file tools confined to its roots, plus the extras (search) of scopes
    that include memory. Groups never get those extras. `by_scope` adds tools offered to the
    scopes of a given name (`private`, `group`), as configured for MCP servers."""

    def __init__(
        self,
        workspace: Path,
        state_dir: Path,
        memory: MemoryFiles,
        memory_tools: list[Tool],
        by_scope: Mapping[str, list[Tool]] | None = None,
        private_tools: list[Tool] | None = None,
        owner_tools: list[Tool] | None = None,
        approvals: Approvals | None = None,
        skills: SkillCatalog | None = None,
        scoped_tools: Mapping[str, list[Tool]] | None = None,
    ) -> None:
        self.workspace = workspace
        self.state_dir = state_dir
        self.memory = memory
        self.memory_tools = memory_tools
        self.by_scope = dict(by_scope or {})
        # Offered to the private scope only (scheduling): a group never sees them.
        self.private_tools = private_tools if private_tools is not None else []
        # Offered in the owner's own chats only (exec): never a group's or a guest's, whatever
        # `shared` says, as their scope is never an owner's.
        self.owner_tools = owner_tools if owner_tools is not None else []
        # The owner's answers to what those tools ask (/approve, /deny), when one can ask.
        self.approvals = approvals
        # Offered per scope name like `by_scope`, but fixed for the process (the web tools):
        # `offer` leaves them be.
        self.scoped_tools = dict(scoped_tools or {})
        # The skills whose files read_file reaches at skills/<name>/ (a group: its own only).
        self.skills = skills
        self._built: dict[Scope, ToolRegistry] = {}

    def offer(self, by_scope: Mapping[str, list[Tool]]) -> None:
        """Replace the tools offered per scope name (an MCP server connected): later turns see them."""
        self.by_scope = dict(by_scope)
        self._built.clear()

    def add_owner_tool(self, tool: Tool) -> None:
        """Offer one more owner-only tool (spawn, made once the agent it needs exists)."""
        self.owner_tools.append(tool)
        self._built.clear()

    def for_scope(self, scope: Scope) -> ToolRegistry:
        registry = self._built.get(scope)
        if registry is None:
            registry = ToolRegistry()
            guard = ScopeGuard(scope, self.workspace, self.state_dir)
            skills = None
            if self.skills is not None:
                skills = SkillFiles(self.skills, scope.name == GROUP, self.state_dir)
            for tool in WorkspaceFiles(guard, self.memory, skills).tools():
                registry.add(tool)
            if scope.memory:
                for tool in self.memory_tools:
                    registry.add(tool)
            for tool in self.by_scope.get(scope.name, []):
                registry.add(tool)
            for tool in self.scoped_tools.get(scope.name, []):
                registry.add(tool)
            if scope.name == PRIVATE:
                for tool in self.private_tools:
                    registry.add(tool)
            if scope.name == PRIVATE and scope.owner:
                for tool in self.owner_tools:
                    registry.add(tool)
            if len(self._built) > 256:  # one per group chat seen; a bound, not a cache policy
                self._built.clear()
            self._built[scope] = registry
        return registry
