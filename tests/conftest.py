"""Shared fixtures: the fake LLM server on loopback and a workspace under tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.llm import FakeLLM, start_fake_llm


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    """A fake OpenAI-compatible server on 127.0.0.1; `fake_llm.url` is its base URL."""
    fake, runner = await start_fake_llm()
    try:
        yield fake
    finally:
        await runner.cleanup()
