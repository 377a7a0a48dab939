"""The system prompt's list of skills, within its share of the prompt budget, and the lists
people see (`/skills`, `memgate skills`).

The prompt names each skill offered to the chat with its description and the path to read;
never its body, which the model reads with read_file when a task matches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.skills.catalog import SkillCatalog, Skills
from gateway.skills.skill import Skill
from memory.budget import PromptBudget

# The list's share of the budget's limit; it is part of the system prompt's fixed share, so
# the bootstrap files and MEMORY.md share what it leaves. Sixty skills of two lines fit in 5%
# of a 32k budget; past that the list ends with a count of those left out.
SKILLS_SHARE = 0.05

HEADER = """\
## Skills
Skills are instructions for particular tasks, each in a SKILL.md file. When a task matches a
skill's description, first read its file with read_file and follow it; files it names are in
the same folder. Read only the skills the task needs."""


def skills_section(skills: Sequence[Skill], budget: PromptBudget | None) -> str:
    """The prompt's part listing `skills` ("" for none), cut to SKILLS_SHARE of the budget."""
    if not skills:
        return ""
    lines = [f"- {s.name}: {s.description} (read {s.path})" for s in skills]
    whole = "\n".join([HEADER, *lines])
    if budget is None:
        return whole
    room = int(budget.limit * SKILLS_SHARE)
    counter = budget.counter
    if counter.at_most(whole) <= room:
        return whole
    kept: list[str] = []
    used = counter.count(HEADER) + 20  # the closing note's tokens, counted generously
    for line in lines:
        used += counter.count(line) + 1
        if used > room:
            break
        kept.append(line)
    left = len(lines) - len(kept)
    note = f"- ({left} more skill(s) not listed: the prompt has no room for them)" if left else ""
    return "\n".join([HEADER, *kept, note]).rstrip()


def describe_skill(skill: Skill) -> str:
    """One line for people: name, where from, state, what for."""
    marks: list[str] = [skill.source]
    if skill.groups:
        marks.append("groups too")
    state = "available" if skill.available else "unavailable: " + "; ".join(skill.missing)
    return f"{skill.name} ({', '.join(marks)}) {state}\n    {skill.description}"


async def skills_reply(catalog: SkillCatalog | None, group: bool) -> str:
    """What /skills answers in a chat: the skills this chat is offered and their state."""
    # The catalog may look at its folders: in a worker thread.
    skills = await asyncio.to_thread(catalog.current) if catalog is not None else None
    visible = skills.visible(group) if skills is not None else ()
    if not visible:
        return (
            "No skills here."
            if group
            else "No skills installed (add workspace/skills/<name>/SKILL.md)."
        )
    return "Skills:\n" + "\n".join(describe_skill(s) for s in visible)


def skills_summary(skills: Skills) -> str:
    """The `memgate status` line."""
    available = [s for s in skills.skills if s.available]
    groups = sum(s.groups for s in available)
    parts = [f"{len(available)} available ({groups} offered to groups)"]
    if unavailable := len(skills.skills) - len(available):
        parts.append(f"{unavailable} unavailable")
    if skills.skipped:
        parts.append(f"{len(skills.skipped)} skipped")
    return ", ".join(parts) + " (memgate skills lists them)"
