"""The `memory.updates` section: what one consolidation may change of MEMORY.md."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.config.fields import SECTION


class _Section(BaseModel):
    # The string under each field is its meaning in docs/configuration.md (gateway/config/reference.py
    # reads it from this source; pydantic's own reading costs every start ~50 ms).
    model_config = SECTION


class MemoryUpdatesConfig(_Section):
    """How consolidation's rewrites of MEMORY.md are checked before they are written."""

    max_drop_share: float = Field(0.5, gt=0, le=1)
    """Largest share of MEMORY.md's lines one consolidation may drop (compaction aside); an update that drops more writes nothing, counts as a failed consolidation and is retried with the reason; 1: no limit."""
    guard_from_lines: int = Field(20, ge=1)
    """The share above is checked once MEMORY.md has at least this many lines (a small file may be rewritten freely)."""
