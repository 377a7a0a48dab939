"""`memgate doctor` against the fakes: every check passes when all is well, and names the key when not."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory.fileio import ensure_private_dir
from tests.conftest import memgate
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram_api import TOKEN, FakeTelegram

pytestmark = pytest.mark.timeout(120)


def doctor_config(
    tmp_path: Path, llm_url: str, telegram: FakeTelegram, discord: FakeDiscord, token: str
) -> Path:
    ensure_private_dir(tmp_path / "workspace")
    ensure_private_dir(tmp_path / "state")
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
state_dir: {tmp_path / "state"}
llm:
  base_url: {llm_url}
  api_key: sk-doctor-secret-0123456789
  max_retries: 0
  timeout: 30  # counted from doctor's start, imports included: room for a loaded machine
memory:
  embeddings:
    base_url: {llm_url}
channels:
  telegram:
    enabled: true
    token: "{token}"
    allow_from: ["42"]
    base_url: {telegram.url}
  discord:
    enabled: true
    token: {discord.token}
    allow_from: ["1"]
    api_base: {discord.api_base}
"""
    )
    return path


async def test_doctor_passes_against_healthy_fakes(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, fake_discord: FakeDiscord
) -> None:
    """All ✓ and exit 0: config, folders, lock, model (with tools), embeddings, platforms, disk."""
    config = doctor_config(tmp_path, fake_llm.url, fake_telegram, fake_discord, TOKEN)
    code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    lines = out.splitlines()
    assert code == 0, out + err
    assert all(line.startswith("✓ ") for line in lines), out
    names = [line.split(":")[0][2:] for line in lines]
    assert names[0] == "config"  # then each check's line as it completes
    assert sorted(names[1:]) == [
        "discord",
        "disk",
        "embeddings",
        "llm",
        "lock",
        "state",
        "telegram",
        "workspace",
    ]
    assert "tools supported" in out and "@" in out and "MESSAGE CONTENT intent on" in out
    assert "sk-doctor-secret" not in out + err and TOKEN not in out + err


async def test_doctor_names_the_keys_to_fix(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_discord: FakeDiscord, refused_port: int
) -> None:
    """A wrong Telegram token and a dead model: two ✗ lines naming the keys, exit 1."""
    dead = f"http://127.0.0.1:{refused_port}/v1"
    config = doctor_config(tmp_path, dead, fake_telegram, fake_discord, "123:wrong-token")
    code, out, _ = await memgate("doctor", "--config", str(config), home=tmp_path)
    failed = [line for line in out.splitlines() if line.startswith("✗ ")]
    assert code == 1
    failures = {line.split(":")[0][2:]: line for line in failed}
    assert sorted(failures) == ["embeddings", "llm", "telegram"]
    assert "llm.base_url" in failures["llm"] and "could not reach 127.0.0.1:" in failures["llm"]
    assert "channels.telegram.token" in failures["telegram"]
    assert "✓ discord" in out


async def test_doctor_says_when_the_model_has_no_tools(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, fake_discord: FakeDiscord
) -> None:
    """A model without tool calling passes, and the line says tools are not supported."""
    fake_llm.tools_unsupported = True
    fake_discord.application_flags = 0
    config = doctor_config(tmp_path, fake_llm.url, fake_telegram, fake_discord, TOKEN)
    code, out, _ = await memgate("doctor", "--config", str(config), home=tmp_path)
    assert code == 1  # the MESSAGE CONTENT intent is off
    assert "✓ llm: " in out and "tools NOT supported" in out
    assert "✗ discord: the MESSAGE CONTENT intent is off" in out


async def test_doctor_names_every_problem_of_the_config_on_its_own_line(tmp_path: Path) -> None:
    """A config with two bad keys: one `✗ config:` line for each, nothing else checked, exit 1."""
    path = tmp_path / "config.yaml"
    path.write_text(f"workspace: {tmp_path / 'ws'}\nllm:\n  temperature: 5\ncolour: blue\n")
    code, out, _ = await memgate("doctor", "--config", str(path), home=tmp_path)
    lines = out.splitlines()
    assert code == 1 and len(lines) == 2, out
    assert all(line.startswith("✗ config: ") for line in lines)
    assert any("llm.temperature" in line for line in lines)
    assert any("colour" in line for line in lines)
