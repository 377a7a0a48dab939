"""Fixtures of the resilience suites: the fake Bot API and `memgate run` processes on tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.harness import Gateway

GatewayFactory = Callable[..., Gateway]


@pytest.fixture
async def make_gateway(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> AsyncIterator[GatewayFactory]:
    """Build a Gateway on tmp_path (config overrides as a dict); any process left is killed."""
    made: list[Gateway] = []

    def factory(settings: dict[str, Any] | None = None, **fields: Any) -> Gateway:
        root = fields.pop("root", tmp_path / f"gateway-{len(made)}")
        gateway = Gateway(root, fake_llm, fake_telegram, settings or {}, **fields)
        made.append(gateway)
        return gateway

    try:
        yield factory
    finally:
        for gateway in made:
            await gateway.close()
