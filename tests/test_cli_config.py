"""The first mistakes with the configuration: each is one line on stderr and the right exit status."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from gateway.config.fields import mask_url
from gateway.config.models import Config
from memory.fileio import atomic_write
from tests.conftest import memgate
from tests.fakes.llm import FakeLLM


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def test_only_a_workspace_means_no_api_key_for_openai(tmp_path: Path) -> None:
    """A config with only `workspace:` set: `chat -m hi` exits 78 naming llm.api_key."""
    config = write(tmp_path / "config.yaml", f"workspace: {tmp_path / 'ws'}\n")
    env = {"OPENAI_API_KEY": ""}
    code, out, err = await memgate(
        "chat", "-m", "hi", "--config", str(config), home=tmp_path, env=env
    )
    assert code == 78 and out == ""
    assert err.count("\n") == 1 and "llm.api_key" in err and "OPENAI_API_KEY" in err
    code, _, err = await memgate("--config", str(config), "run", home=tmp_path, env=env)
    assert code == 78 and err.count("\n") == 1


async def test_an_empty_key_is_fine_for_a_local_server(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """Any base_url but OpenAI's may go without a key (Ollama, llama.cpp)."""
    config = write(
        tmp_path / "config.yaml",
        f"workspace: {tmp_path / 'ws'}\nllm:\n  base_url: {fake_llm.url}\n  max_retries: 0\n",
    )
    code, out, err = await memgate("--config", str(config), "chat", "-m", "hi", home=tmp_path)
    assert (code, out.strip()) == (0, "echo: hi"), err


async def test_chat_and_status_need_no_channel_token_but_run_does(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shell without the service's environment (the bot token in its env file): `chat` and
    `status` work, `status` showing the token unset; `run` exits 78 naming the variable."""
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    config = write(
        tmp_path / "config.yaml",
        f"workspace: {tmp_path / 'ws'}\nllm:\n  base_url: {fake_llm.url}\n  max_retries: 0\n"
        "channels:\n  telegram:\n    enabled: true\n    token: ${TELEGRAM_BOT_TOKEN}\n"
        "    allow_from: ['42']\n",
    )
    code, out, err = await memgate("--config", str(config), "chat", "-m", "hi", home=tmp_path)
    assert (code, out.strip()) == (0, "echo: hi"), err
    code, out, err = await memgate("--config", str(config), "status", home=tmp_path)
    assert code == 0 and "telegram: enabled (token (not set)" in out, err
    code, _, err = await memgate("--config", str(config), "run", home=tmp_path)
    assert code == 78 and "TELEGRAM_BOT_TOKEN" in err and err.count("\n") == 1


async def test_config_before_or_after_the_command_is_the_same(tmp_path: Path) -> None:
    """`--config X status` and `status --config X` print the same; `memory show` reads X's files."""
    workspace = tmp_path / "elsewhere"
    config = write(tmp_path / "x.yaml", f"workspace: {workspace}\nstate_dir: {tmp_path / 's'}\n")
    atomic_write(workspace / "memory" / "MEMORY.md", "# X's own memory\n")
    home = tmp_path / "home"  # its default config would point at another workspace
    before = await memgate("--config", str(config), "status", home=home)
    after = await memgate("status", "--config", str(config), home=home)
    assert before == after and before[0] == 0 and str(workspace) in before[1]
    code, out, _ = await memgate("--config", str(config), "memory", "show", home=home)
    assert (code, out) == (0, "# X's own memory\n")
    code, out, _ = await memgate("memory", "show", "--config", str(config), home=home)
    assert (code, out) == (0, "# X's own memory\n")


async def test_a_config_path_that_does_not_exist_is_exit_78(tmp_path: Path) -> None:
    """An explicit --config that names no file is an error, not a run on the defaults."""
    missing = tmp_path / "typo.yaml"
    for args in (("--config", str(missing), "status"), ("status", "--config", str(missing))):
        code, _, err = await memgate(*args, home=tmp_path)
        assert code == 78 and err.count("\n") == 1 and "typo.yaml: no such config file" in err


async def test_bad_values_are_one_line_without_the_secret(tmp_path: Path) -> None:
    """YAML errors, health.listen, base_url and workspace are each reported in one line."""
    ws_file = write(tmp_path / "a-file", "")
    cases = {
        "llm:\n  api_key: sk-very-secret-value-123\n  model: [unclosed\n": ":4:1: expected",
        "health:\n  listen: localhost\n": "health.listen = 'localhost': must be host:port",
        "llm:\n  api_key: sk-very-secret-value-123\n  base_url: localhost:11434\n": "llm.base_url",
        f"workspace: {ws_file}\n": "workspace = ",
    }
    for text, expected in cases.items():
        config = write(tmp_path / "config.yaml", text)
        code, _, err = await memgate("--config", str(config), "status", home=tmp_path)
        assert code == 78 and err.count("\n") == 1, err
        assert expected in err and "sk-very-secret" not in err


async def test_credentials_in_a_model_url_are_refused_masked(tmp_path: Path) -> None:
    """A model endpoint's URL with user:password or a query string exits 78 naming the key, the
    password and the query's values masked (the SDK would never send them as meant)."""
    cases = {
        "llm:\n  base_url: http://bob:hunter2-pw@localhost:8000/v1\n": (
            "llm.base_url = 'http://bob:***@localhost:8000/v1': must not carry user:password"
        ),
        "llm:\n  base_url: http://localhost:8000/v1?key=hunter2-pw\n": (
            "llm.base_url = 'http://localhost:8000/v1?key=***': must not carry a query"
        ),
        "memory:\n  embeddings:\n    base_url: https://u:hunter2-pw@e.example/v1\n": (
            "memory.embeddings.base_url = 'https://u:***@e.example/v1'"
        ),
        "llm:\n  transcription:\n    base_url: https://h/v1?token=hunter2-pw\n": (
            "llm.transcription.base_url = 'https://h/v1?token=***'"
        ),
    }
    for text, expected in cases.items():
        config = write(tmp_path / "config.yaml", f"workspace: {tmp_path / 'ws'}\n{text}")
        for command in (("status",), ("chat", "-m", "hi")):
            code, out, err = await memgate("--config", str(config), *command, home=tmp_path)
            assert code == 78 and err.count("\n") == 1 and expected in err, err
            assert "hunter2" not in out + err


def test_passwords_and_query_values_of_other_urls_are_redacted() -> None:
    """A Bot API proxy's password or an MCP server's token in its URL is a secret for the logs."""
    config = Config.model_validate(
        {
            "channels": {"telegram": {"base_url": "http://tg:proxy-pass@127.0.0.1:81/bot"}},
            "tools": {"mcp_servers": {"x": {"url": "https://mcp.example/mcp?token=mcp-token-1"}}},
        }
    )
    assert {"proxy-pass", "mcp-token-1"} <= set(config.secrets())
    assert mask_url("https://mcp.example/mcp?token=mcp-token-1&a=b") == (
        "https://mcp.example/mcp?token=***&a=***"
    )


async def test_usage_errors_exit_2(tmp_path: Path) -> None:
    """`memory log -n -1` is a usage error (exit 2), as argparse reports them."""
    code, _, err = await memgate("memory", "log", "-n", "-1", home=tmp_path)
    assert code == 2 and "must be 1 or more" in err


async def test_status_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """`memgate status | head -1`: a reader that went away is no error."""
    config = write(tmp_path / "config.yaml", f"workspace: {tmp_path / 'ws'}\n")
    read, written = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "--config", str(config), "status"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=written,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "MEMGATE_HOME": str(tmp_path)},
    )
    os.close(written)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0 and err == b""
