"""docs/architecture.md lists every module of the three packages under its own folder."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
# A folder's heading: `### gateway/: ...` for a package, `**gateway/agent/**: ...` for a room
# (`**gateway/tools/web/**: ...` for one inside a room).
HEADING = re.compile(r"^(?:### |\*\*)((?:gateway|channels|memory)/(?:[a-z_]+/)*)")


def listed() -> set[str]:
    """Module paths the page names: each backticked name in a table's first cell, under the
    folder of the heading above that table."""
    found: set[str] = set()
    folder = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = HEADING.match(line)
        if heading:
            folder = heading.group(1)
        elif line.startswith("## "):
            folder = None  # past the module lists
        elif folder and line.startswith("| `"):
            cell = line.split("|")[1]
            found.update(f"{folder}{name}.py" for name in re.findall(r"`([a-z_0-9]+)`", cell))
    return found


def test_every_module_is_listed_under_its_folder() -> None:
    """A module added, moved or renamed without its line in the page fails here, and so does a
    line naming a module that is gone."""
    modules = {
        path.relative_to(ROOT).as_posix()
        for package in ("gateway", "channels", "memory")
        for path in (ROOT / package).rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    }
    documented = listed()
    assert sorted(modules - documented) == [], "modules missing from docs/architecture.md"
    assert sorted(documented - modules) == [], "docs/architecture.md names modules that are gone"
