"""A channel's secret is needed only by what connects to the channel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import memgate
from tests.fakes.llm import FakeLLM


async def test_commands_that_reach_no_channel_run_without_its_token(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Telegram and Discord enabled and their token variables unset, `pairing list`, `jobs`,
    `memory show` and `memory search` work; `run`, which connects, exits 78 naming the variable."""
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.delenv("DISCORD_BOT_TOKEN", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'ws'}\nstate_dir: {tmp_path / 'state'}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  max_retries: 0\n"
        "channels:\n"
        "  telegram:\n    enabled: true\n    token: ${TELEGRAM_BOT_TOKEN}\n    allow_from: ['42']\n"
        "  discord:\n    enabled: true\n    token: ${DISCORD_BOT_TOKEN}\n    allow_from: ['7']\n"
    )
    for command in (
        ("pairing", "list"),
        ("jobs",),
        ("memory", "show"),
        ("memory", "search", "anything"),
    ):
        code, _, err = await memgate(*command, "--config", str(config), home=tmp_path)
        assert code == 0, (command, err)
    code, _, err = await memgate("run", "--config", str(config), home=tmp_path)
    assert code == 78 and "TELEGRAM_BOT_TOKEN" in err, err
