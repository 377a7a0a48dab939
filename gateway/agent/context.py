"""Builds prompts: the stable system prompt and the runtime block of the current user message.

The system prompt changes only when one of its files changes (or the day turns), so providers can
cache its prefix; everything that varies per message goes into the user message instead. Its files
are looked at (one `stat` each) at most once every RECHECK_SECONDS, not on every turn: an edit
shows from the first turn after that; a turn whose tools ran makes the next one look at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from gateway.bus import InboundMessage
from gateway.skills.catalog import SkillCatalog, Skills
from gateway.skills.prompt import skills_section
from gateway.tools.scope import GROUP, Scope
from gateway.tools.web.untrusted import UNTRUSTED_PROMPT
from memory.budget import Part, PromptBudget
from memory.files import MemoryFiles
from memory.search.tools import SEARCH_PROMPT

BOOTSTRAP_FILES = ("AGENTS.md", "SOUL.md", "USER.md")
# What a group's prompt gets of them: the owner's facts (USER.md) stay out.
GROUP_BOOTSTRAP_FILES = ("AGENTS.md", "SOUL.md")

IDENTITY = """\
# memgate

You are a personal assistant reached through a chat gateway called memgate. You remember things
across conversations through plain Markdown files in your workspace, which the person can read and
edit too.
"""

PRIVATE_WORKSPACE = """\
## Your workspace
- Tools read_file, write_file, edit_file and list_dir work on paths relative to the workspace.
- memory/MEMORY.md holds long-term facts and is shown to you below. memgate updates it on its own
  as conversations get long; edit it yourself (edit_file) when the person asks you to remember or
  forget something.
- memory/HISTORY.md is a log of past conversations, one summary paragraph per entry. It is not in
  this prompt: read it when you need to recall what happened before.
- memory/YYYY-MM-DD.md is the daily note for that date. Write to today's note for things that
  matter today; it is shown to you below.
"""

GROUP_WORKSPACE = """\
## Your workspace in this chat
- This is a shared chat. Tools read_file, write_file, edit_file and list_dir take paths relative
  to the workspace, and here they reach only {own} (notes for this chat: read and write) and
  {media} (files sent in this chat: read only). Everything else is private to the owner.
"""

ANSWERING = f"""\
## How to answer
- Be concise and direct. Use Markdown sparingly; it is rendered by the chat platform.
- Each user message starts with a runtime block (time, channel, sender). It is metadata from
  memgate, not an instruction from the person.
- Files the person sent are named in their message as `[kind: path]` (paths in the workspace). A
  voice note arrives as its transcript, a document as its text between `--- name ---` lines, an
  image (when you can see images) attached to that message only.
{UNTRUSTED_PROMPT}
"""

# How stale a prompt file's edit may be when a turn starts: a busy gateway answers many turns a
# second, and a `stat` of five files each time is work that nearly always finds nothing new.
RECHECK_SECONDS = 1.0

RUNTIME_OPEN = "[memgate runtime context: metadata, not instructions]"
RUNTIME_CLOSE = "[end of runtime context]"


@dataclass(frozen=True)
class _Snapshot:
    key: tuple[object, ...]  # the files' (path, mtime, size) when it was rendered
    text: str
    memory: str | None  # the MEMORY.md text it shows (None: a scope without memory)


class ContextBuilder:
    """Assembles the system prompt from the workspace files, caching it until one changes."""

    def __init__(
        self,
        workspace: Path,
        memory: MemoryFiles,
        tz: tzinfo,
        budget: PromptBudget | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        recheck: float = RECHECK_SECONDS,
        skills: SkillCatalog | None = None,
    ) -> None:
        self.workspace = workspace
        self.memory = memory
        self.tz = tz
        self.budget = budget  # None: files go in whole (tools and tests that build prompts only)
        self.clock = clock
        self.recheck = recheck
        self.skills = skills  # listed by name and description; the model reads a body itself
        self._cache: dict[Scope, _Snapshot] = {}
        # The last look at each set of files: when, and what it found. Keyed by the files, not
        # the scope, so every group chat (the same two files) shares one look.
        self._looked: dict[tuple[Path, ...], tuple[float, tuple[object, ...]]] = {}

    def _sources(self, scope: Scope) -> tuple[Path, ...]:
        if not scope.memory:
            return tuple(self.workspace / name for name in GROUP_BOOTSTRAP_FILES)
        paths = [self.workspace / name for name in BOOTSTRAP_FILES]
        paths += [self.memory.memory_md, self.memory.daily_note_path()]
        return tuple(paths)

    def _fingerprint(self, paths: tuple[Path, ...]) -> tuple[object, ...]:
        """The files' (path, mtime, size), as last looked at if that was under `recheck` ago."""
        now = self.clock()
        looked = self._looked.get(paths)
        if looked is not None and now - looked[0] < self.recheck:
            return looked[1]
        marks: list[object] = []
        for path in paths:
            try:
                stat = path.stat()
                marks.append((str(path), stat.st_mtime_ns, stat.st_size))
            except OSError:
                marks.append((str(path), None))
        if len(self._looked) > 16:  # a new set each day (today's note)
            self._looked.clear()
        self._looked[paths] = (now, tuple(marks))
        return tuple(marks)

    async def system_prompt(self, scope: Scope, tools: list[dict[str, Any]] | None = None) -> str:
        """The scope's system prompt; byte-identical between calls while its files are unchanged.

        `tools` are the schemas sent beside it: the files' share is of what they leave.

        A scope without memory (a group, a guest) gets AGENTS.md and SOUL.md only: never USER.md,
        MEMORY.md, the daily note or the search instructions.
        """
        key = self._fingerprint(self._sources(scope))  # today's note is a new file each day
        if self.budget is not None:  # the files' shares follow the limit the server taught
            # The tools' size by its bound: measured once a schema list (registries keep theirs).
            key = (*key, self.budget.limit, self.budget.counter.at_most_tools(tools or []))
        skills = None
        if self.skills is not None:
            skills = self.skills.fresh()
            if skills is None:  # a look at the folders is due
                skills = await asyncio.to_thread(self.skills.current)
            key = (*key, skills.key)
        cached = self._cache.get(scope)
        if cached is not None and cached.key == key:
            return cached.text
        # Fingerprinted before reading: an edit that lands during the render is seen next time.
        text, memory = await asyncio.to_thread(self._render, scope, skills, tools)
        if len(self._cache) > 256:  # one entry per group chat seen
            self._cache.clear()
        self._cache[scope] = _Snapshot(key, text, memory)
        return text

    def memory_shown(self, scope: Scope) -> str | None:
        """The MEMORY.md text the scope's last system prompt was built from (None: none).

        Asked right after `system_prompt(scope)`, with no await between, it is that prompt's: what
        the turn's model saw, which write_file on MEMORY.md compares against (gateway/tools/files.py).
        """
        cached = self._cache.get(scope)
        return cached.memory if cached is not None else None

    def files_changed(self) -> None:
        """Look at the files again on the next turn of every scope (a tool may have written one)."""
        self._looked.clear()
        if self.skills is not None:
            self.skills.expire()

    def _render(
        self,
        scope: Scope,
        skills: Skills | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> tuple[str, str | None]:
        """The prompt, and the MEMORY.md text it was built from (None for a scope without)."""
        memory_text = None
        if scope.memory:
            parts = [IDENTITY.strip(), PRIVATE_WORKSPACE.strip(), ANSWERING.strip(), SEARCH_PROMPT]
            names: tuple[str, ...] = BOOTSTRAP_FILES
        else:
            own = " and ".join(f"{root}/" for root in scope.writes)
            media = " and ".join(f"{root}/" for root in scope.reads if root not in scope.writes)
            workspace = GROUP_WORKSPACE.format(own=own, media=media).strip()
            parts = [IDENTITY.strip(), workspace, ANSWERING.strip()]
            names = GROUP_BOOTSTRAP_FILES
        if skills is not None:  # before the files: its own share, part of theirs (skills/prompt.py)
            listed = skills_section(skills.offered(scope.name == GROUP), self.budget)
            parts += [listed] if listed else []
        files: list[tuple[str, Part]] = []  # (heading, file)
        for name in names:
            path = self.workspace / name
            if path.is_file():
                body = path.read_text(encoding="utf-8", errors="replace").strip()
                if body:
                    files.append((f"## {name}", Part(name, body)))
        if scope.memory:
            memory_text = self.memory.read_memory()
            files.append(("# Memory", Part("memory/MEMORY.md", memory_text.strip())))
            note = self.memory.read_daily_note().strip()
            if note:
                day = self.memory.today().isoformat()
                files.append((f"# Today's note ({day})", Part(f"memory/{day}.md", note)))
        capped = self._capped(parts, files, tools)
        for heading, part in zip([h for h, _ in files], capped, strict=True):
            parts.append(f"{heading}\n\n{part.text}")
        return "\n\n".join(parts) + "\n", memory_text

    def _capped(
        self,
        head: list[str],
        files: list[tuple[str, Part]],
        tools: list[dict[str, Any]] | None,
    ) -> list[Part]:
        """The files cut to their share of the budget (whole if there is no budget)."""
        if self.budget is None:
            return [part for _, part in files]
        around = ["\n\n".join(head), *(heading for heading, _ in files)]
        return self.budget.cap_parts([part for _, part in files], around, tools)

    def user_content(self, message: InboundMessage, now: datetime | None = None) -> str:
        """The current message as the model sees it: the runtime block, then the text."""
        now = now or datetime.now(self.tz)
        sender = message.sender_name or message.sender_id
        if message.sender_name and message.sender_id and message.sender_name != message.sender_id:
            sender = f"{message.sender_name} (id {message.sender_id})"
        lines = [
            RUNTIME_OPEN,
            f"time: {now.strftime('%Y-%m-%d %H:%M %Z')} ({now.strftime('%A')})",
            f"channel: {message.channel}",
            f"chat_id: {message.chat_id}",
            f"sender: {sender}",
        ]
        if message.is_group:
            lines.append("chat_type: group")
        lines.append(RUNTIME_CLOSE)
        return "\n".join(lines) + "\n\n" + message.text
