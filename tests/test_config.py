"""Configuration: expansion, validation, exit status 78 with file, key and value."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config.file import load_config, render_config, write_private
from gateway.errors import ConfigError


def run_memgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess with no terminal on stdin."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


@pytest.mark.parametrize(
    ("body", "key", "value"),
    [
        ("llm:\n  modle: gpt-4o\n", "llm.modle", None),
        ("llm:\n  timeout: soon\n", "llm.timeout", "'soon'"),
        ("llm:\n  api_key: ${MEMGATE_TEST_UNSET_VAR}\n", "llm.api_key", "MEMGATE_TEST_UNSET_VAR"),
    ],
)
def test_bad_config_exits_78_naming_file_key_and_value(
    tmp_path: Path, body: str, key: str, value: str | None
) -> None:
    """An unknown key, a wrong type and a missing ${VAR} each exit 78 with a one-line reason."""
    path = tmp_path / "config.yaml"
    path.write_text(f"workspace: {tmp_path / 'ws'}\n{body}")
    result = run_memgate("status", "--config", str(path))
    assert result.returncode == 78
    assert str(path) in result.stderr and key in result.stderr
    if value:
        assert value in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_expansion_with_defaults_and_disabled_channels(tmp_path: Path) -> None:
    """${VAR:-default} falls back; unset variables under a disabled channel are harmless."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "llm:\n  api_key: ${KEY}\n  model: ${MODEL:-gpt-4o}\n"
        "channels:\n  telegram:\n    token: ${TELEGRAM_BOT_TOKEN}\n"
    )
    config = load_config(path, env={"KEY": "sk-abc"})
    assert config.llm.api_key == "sk-abc" and config.llm.model == "gpt-4o"
    path.write_text(
        "llm:\n  api_key: x\nchannels:\n  telegram:\n    enabled: true\n"
        "    token: ${TELEGRAM_BOT_TOKEN}\n"
    )
    with pytest.raises(ConfigError, match=r"channels\.telegram\.token.*TELEGRAM_BOT_TOKEN"):
        load_config(path, env={})


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    """Broken YAML is one line: file:line:column: reason."""
    path = tmp_path / "config.yaml"
    path.write_text("llm:\n  model: [unclosed\n")
    with pytest.raises(ConfigError, match=r"config\.yaml:\d+:\d+: expected"):
        load_config(path)


def test_config_is_written_private_and_valid(tmp_path: Path) -> None:
    """The written config has mode 0600 and loads back, the web console on loopback."""
    path = tmp_path / "sub" / "config.yaml"
    write_private(path, render_config(workspace=tmp_path / "ws", api_key="sk-xyz"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = load_config(path, env={})
    assert config.llm.api_key == "sk-xyz"
    assert config.console.listen == "127.0.0.1:8766"


def test_chat_without_config_or_terminal_exits_78(tmp_path: Path) -> None:
    """First run with no terminal says which key or variable to set, and exits 78."""
    env = {"MEMGATE_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": ""}
    result = run_memgate("chat", "-m", "hi", env=env)
    assert result.returncode == 78
    assert "llm.api_key" in result.stderr and "OPENAI_API_KEY" in result.stderr


def test_embeddings_section_defaults_secret_and_weights(tmp_path: Path) -> None:
    """memory.embeddings: defaults fill in, its api_key is redacted, both weights 0 is refused."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "memory:\n  embeddings:\n    base_url: http://x/v1\n    api_key: ${EMBED_KEY}\n"
    )
    config = load_config(path, env={"EMBED_KEY": "sk-embed-123"})
    embeddings = config.memory.embeddings
    assert embeddings is not None and embeddings.model == "text-embedding-3-small"
    assert (embeddings.vector_weight, embeddings.keyword_weight) == (0.7, 0.3)
    assert "sk-embed-123" in config.secrets()
    assert load_config(tmp_path / "missing.yaml", env={}).memory.embeddings is None
    path.write_text(
        "memory:\n  embeddings:\n    base_url: http://x/v1\n"
        "    vector_weight: 0\n    keyword_weight: 0\n"
    )
    with pytest.raises(ConfigError, match=r"memory\.embeddings\.vector_weight"):
        load_config(path, env={})
