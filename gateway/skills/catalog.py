"""The skills memgate offers: the workspace's `skills/<name>/SKILL.md` and the ones shipped with it.

The workspace's skill wins over a shipped one of the same name (copy a shipped skill's folder into
the workspace to change it). A SKILL.md that cannot be used is skipped with one warning naming the
file, once per version of it; the others load. A workspace skill folder must be a real folder
inside the workspace: a symlinked one is skipped, as the file tools would not follow the link.

The folders are looked at again (a listing and a `stat` per skill) at most once every
`recheck` seconds, and only a SKILL.md whose size or time changed is read again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gateway.skills.skill import SKILL_FILE, Skill, SkillError, Source, read_skill

log = logging.getLogger(__name__)

SHIPPED = Path(__file__).with_name("shipped")
RECHECK_SECONDS = 1.0
_Mark = tuple[int, int]  # a SKILL.md's (mtime_ns, size)


@dataclass(frozen=True)
class Skipped:
    """A SKILL.md that was not loaded, and why."""

    path: Path
    reason: str


@dataclass(frozen=True)
class Skills:
    """One look at the skill folders: the skills in force (by name), those a workspace skill
    hides, and the files skipped."""

    skills: tuple[Skill, ...] = ()
    shadowed: tuple[Skill, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    key: tuple[object, ...] = field(default=(), compare=False)

    def visible(self, group: bool) -> tuple[Skill, ...]:
        """The skills a chat may know of and read: every one, or in a group those marked for it."""
        return tuple(s for s in self.skills if s.groups or not group)

    def offered(self, group: bool) -> tuple[Skill, ...]:
        """What the chat's prompt lists: its visible skills whose requirements are met."""
        return tuple(s for s in self.visible(group) if s.available)

    def find(self, name: str, group: bool) -> Skill | None:
        return next((s for s in self.visible(group) if s.name == name), None)


class SkillCatalog:
    """Loads the skills of a workspace and the shipped folder, and keeps them current."""

    def __init__(
        self,
        workspace: Path,
        shipped: Path | None = SHIPPED,
        *,
        clock: Callable[[], float] = time.monotonic,
        recheck: float = RECHECK_SECONDS,
    ) -> None:
        self.workspace = workspace
        self.folders: list[tuple[Path, Source]] = [(workspace / "skills", "workspace")]
        if shipped is not None:
            self.folders.append((shipped, "shipped"))
        self.clock = clock
        self.recheck = recheck
        self._read: dict[Path, tuple[_Mark, Skill | SkillError]] = {}
        self._loaded: Skills | None = None
        self._looked = float("-inf")
        self._lock = threading.Lock()  # the tools' worker threads and the prompt builder ask

    def fresh(self) -> Skills | None:
        """The last look, if it is recent enough to stand (no file work); else None."""
        if self._loaded is not None and self.clock() - self._looked < self.recheck:
            return self._loaded
        return None

    def current(self) -> Skills:
        """The skills as they are now, looked at again if the last look is stale (blocking)."""
        with self._lock:
            loaded = self.fresh()
            if loaded is None:
                loaded = self._loaded = self._load()
                self._looked = self.clock()
            return loaded

    def expire(self) -> None:
        """Look at the folders again on the next ask (a tool may have written a skill)."""
        self._looked = float("-inf")

    def _load(self) -> Skills:
        found: dict[str, Skill] = {}
        shadowed: list[Skill] = []
        skipped: list[Skipped] = []
        key: list[object] = []
        seen: set[Path] = set()
        for folder, source in self.folders:
            for path in _skill_files(folder):
                seen.add(path)
                try:
                    stat = path.stat()
                except OSError:
                    continue  # removed between the listing and now
                mark = (stat.st_mtime_ns, stat.st_size)
                result = self._parse(path, mark, source)
                if isinstance(result, SkillError):
                    skipped.append(Skipped(path, str(result)))
                    continue
                result = result.checked()  # every look: a program installed since counts
                key.append((str(path), mark, result.missing))
                if result.name in found:
                    shadowed.append(result)
                else:
                    found[result.name] = result
        for gone in set(self._read) - seen:
            del self._read[gone]
        skills = tuple(sorted(found.values(), key=lambda s: s.name))
        return Skills(skills, tuple(shadowed), tuple(skipped), tuple(key))

    def _parse(self, path: Path, mark: _Mark, source: Source) -> Skill | SkillError:
        """The file's skill, read again only if it changed; a bad one warned about once."""
        known = self._read.get(path)
        if known is not None and known[0] == mark:
            return known[1]
        result: Skill | SkillError
        try:
            if source == "workspace" and not _real_folder(path, self.workspace):
                raise SkillError(
                    "is reached through a symlink; a skill folder must be a real folder"
                )
            result = read_skill(path, source)
        except SkillError as exc:
            result = exc
            log.warning("skill skipped file=%s reason=%s", path, exc)
        self._read[path] = (mark, result)
        return result


def _skill_files(folder: Path) -> list[Path]:
    """`<folder>/<name>/SKILL.md` of each subfolder that has one, by name."""
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError:  # no skills folder (yet)
        return []
    return [e / SKILL_FILE for e in entries if (e / SKILL_FILE).exists() and e.is_dir()]


def _real_folder(path: Path, workspace: Path) -> bool:
    """Whether `path` lies where its text says inside the workspace, with no link on the way."""
    try:
        root = workspace.resolve()
        return path.resolve() == root / path.relative_to(workspace) and not path.is_symlink()
    except (OSError, RuntimeError, ValueError):
        return False
