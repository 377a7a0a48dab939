"""Each system's configuration for a run, as the raw mapping its own loader reads (stdlib only).

Both point at the same fake LLM with the same model, context window and completion limit, so
their prompt budgets are the same number: context_window - max_tokens - 1024 (memgate's README, "Configuration",
nanobot's MemoryConsolidator). Everything else stays at each system's defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.protocol import API_KEY, MODEL

CONTEXT_WINDOW = 128_000
MAX_TOKENS = 4096


def budget(context_window: int = CONTEXT_WINDOW, max_tokens: int = MAX_TOKENS) -> int:
    """Prompt tokens both systems allow themselves for one call."""
    return context_window - max_tokens - 1024


def whole_history_window(messages: int) -> int:
    """Figure b, history left unconsolidated: a context window that holds `messages` stored
    messages (~60 tokens each) at under half its budget, so that neither system consolidates."""
    return max(CONTEXT_WINDOW, 200 * messages + CONTEXT_WINDOW)


def memgate_config(
    workspace: Path,
    llm_url: str,
    *,
    context_window: int = CONTEXT_WINDOW,
    max_tokens: int = MAX_TOKENS,
    memory: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """memgate's YAML config as a mapping; no retries, as in its tests."""
    return {
        "workspace": str(workspace),
        # Each instance its own state folder: figure c runs two in one process.
        "state_dir": str(workspace.parent / f"{workspace.name}.state"),
        "llm": {
            "base_url": llm_url,
            "api_key": API_KEY,
            "model": MODEL,
            "context_window": context_window,
            "max_tokens": max_tokens,
            "timeout": 30,
            "max_retries": 0,
        },
        "memory": dict(memory or {}),
        "log_level": "WARNING",
    }


def nanobot_config(
    workspace: Path,
    llm_url: str,
    *,
    context_window: int = CONTEXT_WINDOW,
    max_tokens: int = MAX_TOKENS,
) -> dict[str, Any]:
    """nanobot's config.json: the `custom` OpenAI-compatible provider at the fake."""
    return {
        "agents": {
            "defaults": {
                "workspace": str(workspace),
                "model": MODEL,
                "provider": "custom",
                "maxTokens": max_tokens,
                "contextWindowTokens": context_window,
                "temperature": 0.7,
            }
        },
        "providers": {"custom": {"apiKey": API_KEY, "apiBase": llm_url}},
    }
