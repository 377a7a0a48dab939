"""MEMORY.md, HISTORY.md and versions: atomic replacement that keeps the previous text."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import pytest

from memory.errors import VersionNotFoundError
from memory.files import MEMORY_TEMPLATE, MemoryFiles


def test_template_is_created_with_its_sections(tmp_path: Path) -> None:
    """A missing MEMORY.md is created from the template with the four sections."""
    files = MemoryFiles(tmp_path, UTC)
    text = files.read_memory()
    assert text == MEMORY_TEMPLATE
    for section in ("User Information", "Preferences", "Project Context", "Important Notes"):
        assert f"## {section}\n\n(" in text


def test_rewrite_keeps_the_previous_version_and_restores(tmp_path: Path) -> None:
    """Each change keeps the old text under versions/; restore brings it back, keeping the current."""
    files = MemoryFiles(tmp_path, UTC)
    files.read_memory()
    assert files.write_memory(MEMORY_TEMPLATE) is None  # unchanged: nothing kept
    kept = files.write_memory("v2")
    assert kept is not None and kept.read_text() == MEMORY_TEMPLATE
    files.write_memory("v3")
    assert [p.read_text() for p in files.list_versions()] == [MEMORY_TEMPLATE, "v2"]
    files.restore(files.list_versions()[0].name)
    assert files.memory_md.read_text() == MEMORY_TEMPLATE
    assert files.list_versions()[-1].read_text() == "v3"
    with pytest.raises(VersionNotFoundError):
        files.restore("missing")
    assert not list(files.dir.glob(".*.tmp"))


def test_history_entries_are_appended_with_a_blank_line(tmp_path: Path) -> None:
    """HISTORY.md grows by one entry and a blank line per append."""
    files = MemoryFiles(tmp_path, UTC)
    files.append_history("[2026-01-01 10:00] first")
    files.append_history("[2026-01-01 11:00] second\n")
    assert files.read_history() == "[2026-01-01 10:00] first\n\n[2026-01-01 11:00] second\n\n"
