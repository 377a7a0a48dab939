"""One skill: its SKILL.md's front matter read and checked, and whether its requirements are met.

A SKILL.md starts with YAML front matter between two `---` lines, then the instructions:

    ---
    name: tidy-memory          # required: a-z, 0-9 and single hyphens, the folder's own name
    description: Rewrite ...   # required: what it is for and when to use it (one paragraph)
    requires:                  # optional: what it needs to work
      bins: [pdftotext]        #   programs on PATH
      env: [WEATHER_API_KEY]   #   environment variables that must be set
    groups: true               # optional: offered in group chats too (default: private only)
    ---

`requires` is also read from `metadata: {nanobot|openclaw: {requires: ...}}`, where skills written
for those projects keep it. This module is the one reader of front matter (it owns `yaml` for it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml

SKILL_FILE = "SKILL.md"
# Past this a SKILL.md is not instructions any more; the front matter is at its top anyway.
MAX_SKILL_BYTES = 256 * 1024
MAX_DESCRIPTION = 1024
_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)
# Where skills written for other assistants keep their requirements.
_FOREIGN_METADATA = ("memgate", "nanobot", "openclaw")

Source = Literal["workspace", "shipped"]


class SkillError(ValueError):
    """A SKILL.md that cannot be used; the message says why, for one warning line."""


@dataclass(frozen=True)
class Skill:
    """A loaded skill. `missing` lists its unmet requirements (empty: available)."""

    name: str
    description: str
    folder: Path
    source: Source
    groups: bool = False
    bins: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def available(self) -> bool:
        return not self.missing

    @property
    def path(self) -> str:
        """Where the model reads it, relative to the workspace (gateway/tools/skill_files.py)."""
        return f"skills/{self.name}/{SKILL_FILE}"

    def checked(self) -> Skill:
        """The skill with its requirements looked up now (PATH and the environment change)."""
        missing = [f"program {b} not found on PATH" for b in self.bins if shutil.which(b) is None]
        missing += [f"environment variable {e} not set" for e in self.env if not os.environ.get(e)]
        return replace(self, missing=tuple(missing))


def read_skill(path: Path, source: Source) -> Skill:
    """The skill whose SKILL.md is at `path`, requirements checked; SkillError if it is unusable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SKILL_BYTES + 1)
    except OSError as exc:
        raise SkillError(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_SKILL_BYTES:
        raise SkillError(f"is over {MAX_SKILL_BYTES // 1024} KB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SkillError("is not UTF-8 text") from None
    return parse_skill(text, path.parent, source).checked()


def parse_skill(text: str, folder: Path, source: Source) -> Skill:
    """The skill a SKILL.md's text describes (requirements not yet checked)."""
    match = _FRONT.match(text)
    if match is None:
        raise SkillError(
            "has no front matter: it must start with a '---' line, then name: and description:, then '---'"
        )
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise SkillError(f"front matter is not valid YAML{where}") from None
    if not isinstance(meta, dict):
        raise SkillError("front matter must be a mapping of keys (name:, description:)")
    name = meta.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SkillError("front matter has no name:")
    if len(name) > 64 or not _NAME.fullmatch(name):
        raise SkillError(f"name {name!r} must be a-z, 0-9 and single hyphens, 64 at most")
    if name != folder.name:
        raise SkillError(f"name {name!r} must be its folder's name, {folder.name!r}")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("front matter has no description:")
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION:
        raise SkillError(f"description is over {MAX_DESCRIPTION} characters")
    groups = meta.get("groups", False)
    if not isinstance(groups, bool):
        raise SkillError(f"groups: must be true or false, not {groups!r}")
    bins, env = _requirements(meta)
    return Skill(name, description, folder, source, groups, bins, env)


def _requirements(meta: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    requires = meta.get("requires")
    metadata = meta.get("metadata")
    if isinstance(metadata, str):  # nanobot writes it as a JSON string
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    if requires is None and isinstance(metadata, dict):
        for key in _FOREIGN_METADATA:
            if isinstance(metadata.get(key), dict) and "requires" in metadata[key]:
                requires = metadata[key]["requires"]
                break
    if requires is None:
        return (), ()
    if not isinstance(requires, dict) or set(requires) - {"bins", "env"}:
        raise SkillError("requires: takes bins: (programs) and env: (variables), each a list")
    found = []
    for key in ("bins", "env"):
        items = requires.get(key) or []
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            raise SkillError(f"requires.{key}: must be a list of names")
        found.append(tuple(items))
    return found[0], found[1]
