"""`memgate skills`: every skill the workspace and memgate hold, with its state, and the SKILL.md
files skipped and why."""

from __future__ import annotations

import argparse
import logging

from gateway.config.models import Config
from gateway.skills.catalog import SkillCatalog
from gateway.skills.prompt import describe_skill


def cmd_skills(config: Config, args: argparse.Namespace) -> int:
    """List the skills; exit 1 if a SKILL.md was skipped, so a check in a script notices."""
    # The skipped files are listed below; the catalog's warning would say each a second time.
    logging.getLogger("gateway.skills.catalog").setLevel(logging.ERROR)
    skills = SkillCatalog(config.workspace).current()
    lines = [describe_skill(skill) for skill in skills.skills]
    if not lines:
        lines.append(f"no skills (add {config.workspace / 'skills'}/<name>/SKILL.md)")
    lines += [
        f"{s.name} ({s.source}) hidden by the workspace's skill of that name"
        for s in skills.shadowed
    ]
    lines += [f"skipped {s.path}: {s.reason}" for s in skills.skipped]
    print("\n".join(lines))
    return 1 if skills.skipped else 0
