"""What `/status` shows in a chat: its session, what is not yet in memory, the budget, the model."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.config.models import LLMConfig
from gateway.units import format_size
from memory.budget import PromptBudget
from memory.sessions.store import Session
from memory.tokens import TokenCounter


async def chat_status(
    session: Session,
    counter: TokenCounter,
    llm: LLMConfig,
    memory_md: Path | None,
    budget: PromptBudget | None = None,
) -> str:
    """What `/status` shows in a chat: its session, what is not yet in memory, the budget (and
    what it is by memgate's count, where the server taught a ratio), the model, and MEMORY.md's
    size only where the chat may know of it (`memory_md` given)."""
    pending = len(session.messages) - session.last_consolidated
    pending_tokens = await asyncio.to_thread(
        session.tokens_between, session.last_consolidated, len(session.messages), counter
    )
    size = _file_size(session.path)
    lines = [
        f"Session: {session.key}",
        f"Messages: {len(session.messages)} ({format_size(size)} on disk)",
        f"Not yet in memory: {pending} messages, {pending_tokens} tokens",
        f"Prompt budget: {llm.budget} tokens",
    ]
    if budget is not None and budget.limit != budget.base_limit:
        ratio = budget.calibration.ratio
        why = (
            f"the model's tokenizer needs {ratio:.2f}x as many"
            if ratio > 1
            else "the server named a smaller context"
        )
        lines[-1] += f" ({budget.limit} by memgate's count: {why})"
    if memory_md is not None:
        lines.append(f"MEMORY.md: {format_size(_file_size(memory_md))}")
    lines.append(f"Model: {llm.model}")
    return "\n".join(lines)


def _file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
