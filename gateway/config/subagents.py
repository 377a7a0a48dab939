"""The `agent.subagents` section: background agents the owner's chat starts with `spawn`."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.config.fields import SECTION


class SubagentsConfig(BaseModel):
    # The string under each field is its meaning in docs/configuration.md (gateway/config/reference.py
    # reads it from this source).
    model_config = SECTION

    enabled: bool = True
    """Offer the spawn tool in the owner's private chats (never in groups or to guests)."""
    max_running: int = Field(2, ge=1, le=32)
    """Background agents running at once; a further spawn is refused, saying so."""
    max_turns: int = Field(20, ge=1, le=200)
    """Model calls one background agent may make before it stops and reports what it has."""
    timeout: float = Field(600, gt=0, le=86_400)
    """Seconds one background agent may run; past it it is stopped and its chat is told."""
