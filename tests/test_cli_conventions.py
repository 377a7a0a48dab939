"""The command line keeps the shell's conventions: completion for bash, zsh and fish, grep's exit
status for a search without a match, quiet output into a pipe closed early, and a configuration
reference that speaks of each platform in its own terms."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from gateway.config.reference import render
from memory.fileio import ensure_private_dir
from tests.conftest import memgate
from tests.fakes.llm import FakeLLM, text

pytestmark = pytest.mark.timeout(60)

COMMANDS = {
    "init",
    "setup",
    "doctor",
    "run",
    "chat",
    "status",
    "pairing",
    "jobs",
    "memory",
    "skills",
}


@pytest.mark.parametrize(
    ("shell", "hook"),
    [("bash", "complete "), ("zsh", "#compdef memgate"), ("fish", "complete ")],
)
async def test_completion_script_for_each_shell(tmp_path: Path, shell: str, hook: str) -> None:
    """`memgate completion SHELL` prints a script that registers memgate with that shell."""
    code, out, err = await memgate("completion", shell, home=tmp_path)
    assert code == 0, err
    assert hook in out and "memgate" in out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
async def test_completion_offers_the_subcommands(tmp_path: Path, shell: str) -> None:
    """Asked as each shell's script asks (the completion protocol), memgate offers its commands."""
    offered = await complete("memgate ", shell, tmp_path)
    assert COMMANDS | {"completion"} <= offered
    assert {"show", "log", "restore", "consolidate", "search"} <= await complete(
        "memgate memory ", shell, tmp_path
    )


async def complete(line: str, shell: str, tmp_path: Path) -> set[str]:
    """The words the real CLI offers for `line`, through argcomplete's environment protocol."""
    answer = tmp_path / f"completions-{shell}"
    env = {
        **os.environ,
        "MEMGATE_HOME": str(tmp_path),
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_SHELL": shell,
        "_ARGCOMPLETE_IFS": "\n",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "COMP_TYPE": "9",
    }
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert answer.exists(), err.decode()
    # zsh's entries are name:description, fish's name<TAB>description.
    return {entry.split(":")[0].split("\t")[0].strip() for entry in answer.read_text().split("\n")}


async def test_memory_search_without_a_match_exits_1_like_grep(tmp_path: Path) -> None:
    """No hit: exit 1 and nothing on stdout (the reason on stderr); a hit: exit 0."""
    workspace = tmp_path / "workspace"
    ensure_private_dir(workspace / "memory")
    (workspace / "memory" / "MEMORY.md").write_text(
        "# Memory\n\n- The wifi password is swordfish\n"
    )
    config = tmp_path / "config.yaml"
    config.write_text(f"workspace: {workspace}\nstate_dir: {tmp_path / 'state'}\n")
    args = ("memory", "search", "--config", str(config))
    code, out, err = await memgate(*args, "xylophone", home=tmp_path)
    assert (code, out) == (1, ""), err
    assert "no matches for 'xylophone'" in err
    code, out, err = await memgate(*args, "swordfish", home=tmp_path)
    assert code == 0 and "swordfish" in out, err


async def test_chat_message_into_a_pipe_closed_early_ends_quietly(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """`memgate chat -m … | head -n 1`: once the reader is gone, no error and no traceback; the
    answer counts as shown (it is not offered again as kept from before a restart)."""
    fake_llm.stream_rate = 400  # the answer is still being written when the reader leaves
    fake_llm.push(text("first line\n" + "and then many more words\n" * 200))
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'workspace'}\nstate_dir: {tmp_path / 'state'}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  api_key: sk-pipe-0123456789\n  max_retries: 0\n"
    )
    read, write = os.pipe()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "chat", "--config", str(config), "-m", "hello"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=write,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "MEMGATE_HOME": str(tmp_path)},
    )
    os.close(write)
    with os.fdopen(read, "rb") as reader:  # `head -n 1`: one line, then the pipe is closed
        first = await asyncio.to_thread(reader.readline)
    assert first == b"first line\n"
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    assert err.decode() == ""
    code, out, err_again = await memgate(
        "chat", "--config", str(config), "-m", "again", home=tmp_path
    )
    assert code == 0, err_again
    assert "kept from before a restart" not in out


def test_configuration_reference_speaks_of_each_platform_in_its_own_terms() -> None:
    """The keys every chat platform shares say each platform's own token variable, and only
    Telegram's allow_from takes @usernames."""
    rows = {
        line.split("|")[1].strip().strip("`"): line.split("|")[3]
        for line in render().splitlines()
        if line.startswith("| `channels.")
    }
    assert "${TELEGRAM_BOT_TOKEN}" in rows["channels.telegram.token"]
    assert "${DISCORD_BOT_TOKEN}" in rows["channels.discord.token"]
    assert "@usernames" in rows["channels.telegram.allow_from"]
    discord = " ".join(
        meaning for key, meaning in rows.items() if key.startswith("channels.discord")
    )
    assert "Telegram" not in discord and "TELEGRAM" not in discord and "username" not in discord
