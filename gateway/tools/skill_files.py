"""Skills' files for read_file and list_dir, read-only, at `skills/<name>/...` in every scope.

The prompt names a skill's file as `skills/<name>/SKILL.md`. A shipped skill is not in the
workspace and a group's scope does not reach the workspace's skills/ folder, so where the scope
refuses such a path, or has no such file, it is looked for in the folder of the skill of that
name, if the chat is offered that skill: in a group only skills marked `groups: true`. Nothing
else is opened: the path must stay inside that one folder once resolved, with no `..` and no
symlink on the way, and never inside the state folder. Writes never come here.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from gateway.skills.catalog import SkillCatalog

SKILLS_DIR = "skills"


class SkillFiles:
    """The files of the skills one chat is offered, by their `skills/<name>/...` path."""

    def __init__(self, catalog: SkillCatalog, group: bool, state_dir: Path) -> None:
        self.catalog = catalog
        self.group = group
        self.state_dir = state_dir.resolve()

    def resolve(self, raw: object) -> Path | None:
        """The real path of the skill file `raw` names, or None if it names none this chat may
        read. Blocking (it may look at the skill folders): call it from a worker thread."""
        if not isinstance(raw, str) or "\x00" in raw or "\\" in raw:
            return None
        path = PurePosixPath(raw.strip())  # `.` parts fold away; `..` stays and is refused
        parts = path.parts
        if path.is_absolute() or len(parts) < 2 or parts[0] != SKILLS_DIR or ".." in parts:
            return None
        skill = self.catalog.current().find(parts[1], self.group)
        if skill is None:
            return None
        try:
            root = skill.folder.resolve(strict=True)
            resolved = root.joinpath(*parts[2:]).resolve()
        except (OSError, RuntimeError):  # the folder is gone, a symlink loop, a path too long
            return None
        if resolved != root and not resolved.is_relative_to(root):
            return None
        if ".." in resolved.parts or _link_below(resolved, root):
            return None
        if resolved == self.state_dir or resolved.is_relative_to(self.state_dir):
            return None
        return resolved


def _link_below(path: Path, root: Path) -> bool:
    """Whether `path`, or a folder between it and `root`, is a symlink."""
    probe = path
    while probe != root and probe != probe.parent:
        if probe.is_symlink():
            return True
        probe = probe.parent
    return False
