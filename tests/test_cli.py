"""The `memgate` command as a person runs it: init, chat -m, status, memory show/log/restore."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.conftest import converse, memgate
from tests.fakes.llm import FakeLLM, text


async def test_init_writes_templates_and_never_overwrites(tmp_path: Path) -> None:
    """init creates config and workspace files once; a second run keeps every edit."""
    home = tmp_path / "home"
    code, out, _ = await memgate("init", home=home)
    assert code == 0 and "created" in out
    workspace = home / "workspace"
    for name in ("AGENTS.md", "SOUL.md", "USER.md", "memory/MEMORY.md"):
        assert (workspace / name).is_file()
    assert "## User Information" in (workspace / "memory/MEMORY.md").read_text()
    assert oct((home / "config.yaml").stat().st_mode & 0o777) == "0o600"
    (workspace / "SOUL.md").write_text("my own soul")
    code, out, _ = await memgate("init", home=home)
    assert code == 0 and "created" not in out
    assert (workspace / "SOUL.md").read_text() == "my own soul"


async def test_init_with_a_channel_enabled_before_its_token_is_set(tmp_path: Path) -> None:
    """init on a config with Telegram enabled works while the token's variable is still unset."""
    home = tmp_path / "home"
    home.mkdir()
    config = home / "config.yaml"
    example = Path(__file__).parent.parent / "deploy/config.example.yaml"
    config.write_text(
        example.read_text().replace(
            "  telegram:\n    enabled: false", "  telegram:\n    enabled: true"
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_TOKEN", "_API_KEY"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "init", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**env, "MEMGATE_HOME": str(home)},
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    assert (home / "workspace/AGENTS.md").is_file()
    assert "${TELEGRAM_BOT_TOKEN}" in config.read_text()


async def test_chat_message_status_and_memory_commands(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """chat -m prints the model's reply; status and memory show/log/restore work on the files."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    config = home / "config.yaml"
    config.write_text(config.read_text().replace("https://api.openai.com/v1", fake_llm.url))
    env = {"OPENAI_API_KEY": "sk-cli-test-key-123456"}
    fake_llm.push(text("Hello from the fake model."))
    code, out, err = await memgate("chat", "-m", "hi there", home=home, env=env)
    assert (code, out.strip()) == (0, "Hello from the fake model."), err
    assert (home / "workspace/sessions/terminal:local.jsonl").is_file()

    code, out, _ = await memgate("status", home=home, env=env)
    assert code == 0 and "sessions:   1 live" in out and "sk-cli-test-key-123456" not in out

    memory_md = home / "workspace/memory/MEMORY.md"
    original = memory_md.read_text()
    from datetime import UTC

    from memory.files import MemoryFiles

    MemoryFiles(home / "workspace", UTC).write_memory("# Long-term Memory\n\nnew text\n")
    code, out, _ = await memgate("memory", "show", home=home, env=env)
    assert out == "# Long-term Memory\n\nnew text\n"
    code, out, _ = await memgate("memory", "restore", home=home, env=env)
    assert code == 0 and "MEMORY." in out
    code, out, _ = await memgate("memory", "restore", "latest", home=home, env=env)
    assert code == 0 and memory_md.read_text() == original
    code, out, _ = await memgate("memory", "restore", "nope", home=home, env=env)
    assert code == 1 and "no version named" in _
    (home / "workspace/memory/HISTORY.md").write_text(
        "[2026-01-01 10:00] one\n\n[2026-01-02 10:00] two\n\n"
    )
    code, out, _ = await memgate("memory", "log", "-n", "1", home=home, env=env)
    assert out.strip() == "[2026-01-02 10:00] two"


async def test_memory_consolidate_command(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """`memory consolidate --session KEY` and `--all` consolidate now and report what is left."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    config = home / "config.yaml"
    config.write_text(config.read_text().replace("https://api.openai.com/v1", fake_llm.url))
    env = {"OPENAI_API_KEY": "sk-cli-test-key-123456"}
    await memgate("chat", "-m", "the wifi password is on the fridge", home=home, env=env)
    await memgate("chat", "--session", "terminal:other", "-m", "hello", home=home, env=env)
    code, out, err = await memgate(
        "memory", "consolidate", "--session", "terminal:local", home=home, env=env
    )
    assert code == 0, err
    assert "consolidated 1 session(s); 0 message(s) still pending" in out
    history = (home / "workspace/memory/HISTORY.md").read_text()
    assert "wifi password" in history and "hello" not in history
    code, out, _ = await memgate("memory", "consolidate", "--all", home=home, env=env)
    assert code == 0 and "consolidated 2 session(s)" in out
    code, _, err = await memgate("memory", "consolidate", "--session", "nope:1", home=home, env=env)
    assert code == 1 and err.strip().splitlines()[-1].startswith("memgate: no session 'nope:1'")


async def test_first_run_asks_on_a_terminal_and_goes_on(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """With no config, `memgate chat` on a terminal asks endpoint, key and model, then answers."""
    home = tmp_path / "home"
    answers = [("endpoint", fake_llm.url), ("API key", "sk-first-run-key-123456"), ("Model", "")]
    env = {**os.environ, "MEMGATE_HOME": str(home), "OPENAI_API_KEY": ""}
    code, output = await asyncio.to_thread(converse, ["chat", "-m", "hello there"], answers, env)
    assert code == 0, output
    assert "echo: hello there" in output
    config = (home / "config.yaml").read_text()
    assert fake_llm.url in config and "model: gpt-4o-mini" in config
    assert oct((home / "config.yaml").stat().st_mode & 0o777) == "0o600"
    assert (home / "workspace" / "SOUL.md").is_file()
