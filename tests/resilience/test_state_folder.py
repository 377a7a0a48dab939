"""The state folder as `memgate run` uses it: the upgrade from the old layout, the lock, the modes.

Real processes (`memgate init`, `chat`, `run`) against the fakes; files checked on disk.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.cli.chat import chat_history_path
from gateway.errors import ConfigError, WorkspaceLockedError
from gateway.service.app import open_runtime
from memory.search.searcher import MemorySearch
from tests.conftest import build_config
from tests.fakes.llm import FakeLLM, parallel, text, tool_call
from tests.fakes.telegram_api import BOT, FakeTelegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import SECRETS, read_sessions, until

pytestmark = pytest.mark.timeout(120)


def old_update(update_id: int, text: str) -> dict[str, object]:
    """A private message from the owner (42), as the Bot API sent it and the old inbox kept it."""
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1_700_000_000,
            "chat": {"id": 42, "type": "private"},
            "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
            "text": text,
        },
    }


async def old_layout(workspace: Path) -> None:
    """A workspace as the previous memgate left it after a kill: state, index and lock inside."""
    old_state = workspace / ".state"
    old_state.mkdir(parents=True)
    journal = old_state / f"telegram-{BOT['id']}-inbox.jsonl"
    journal.write_text(json.dumps({"update": old_update(900, "kept across the upgrade")}) + "\n")
    (old_state / f"telegram-{BOT['id']}.json").write_text('{"last_update_id": 899}')
    (workspace / "memory").mkdir()
    (workspace / "memory" / "HISTORY.md").write_text("[2026-01-01 10:00] an old entry\n\n")
    search = MemorySearch(workspace, UTC)  # without db_path: the old place, .index/
    await search.refresh()
    await search.aclose()
    assert (workspace / ".index" / "memory.db").is_file()
    (workspace / ".memgate.lock").write_text("12345\n")


async def test_an_old_workspace_moves_its_state_out_and_replays_the_journal(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram
) -> None:
    """`.state/`, `.index/` and `.memgate.lock` move to the state folder once; nothing is lost."""
    gateway = make_gateway()
    workspace, state = gateway.workspace, gateway.state_dir
    await old_layout(workspace)
    await gateway.start()
    await until(
        lambda: any("kept across the upgrade" in p.get("plain", "") for p in fake_telegram.sent()),
        30,
        "the journaled message answered from its new place",
    )
    assert await gateway.stop() == 0
    await gateway.start()
    assert await gateway.stop() == 0

    for old in (".state", ".index", ".memgate.lock"):
        assert not (workspace / old).exists(), old
    assert (state / "index" / "memory.db").is_file()
    assert json.loads((state / f"telegram-{BOT['id']}.json").read_text())["last_update_id"] >= 900
    journal = (state / f"telegram-{BOT['id']}-inbox.jsonl").read_text()
    assert "kept across" not in journal  # handled: the second start kept nothing to replay
    [session] = read_sessions(workspace)
    assert session.texts("user") == ["kept across the upgrade"]
    assert "an old entry" in (workspace / "memory" / "HISTORY.md").read_text()
    assert gateway.log().count("moved gateway state out of the workspace") == 1


async def test_an_older_gateway_still_running_keeps_its_workspace(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """While an old memgate holds `.memgate.lock`, a new one refuses to start and moves nothing."""
    config = build_config(tmp_path / "workspace", fake_llm.url)
    await old_layout(config.workspace)
    fd = os.open(config.workspace / ".memgate.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(WorkspaceLockedError, match="older memgate"):
            async with open_runtime(config):
                pass
    finally:
        os.close(fd)
    assert (config.workspace / ".state").is_dir() and (config.workspace / ".index").is_dir()


async def test_no_tool_touches_the_lock_and_a_second_run_exits_1(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """The model cannot read, replace or edit the lock; a second run on the workspace exits 1."""
    first = make_gateway()
    await first.start()
    lock = first.state_dir / "memgate.lock"
    before = lock.read_bytes()
    paths = [str(lock), f"../{first.state_dir.name}/memgate.lock", "../state", ".memgate.lock"]
    calls = [tool_call("read_file", {"path": p}) for p in paths]
    calls += [tool_call("write_file", {"path": p, "content": "1"}) for p in paths[:2]]
    calls.append(tool_call("edit_file", {"path": str(lock), "old_text": "1", "new_text": "2"}))
    fake_llm.push(parallel(*calls))
    fake_llm.push(text("the lock is out of reach"))
    fake_telegram.message("swap the lock")
    await fake_telegram.wait_sent(1, within=30)
    assert lock.read_bytes() == before
    assert not (first.workspace / ".memgate.lock").exists()

    # Another config on the same workspace, even with a state folder of its own, is refused.
    second = make_gateway({"workspace": str(first.workspace)})
    await second.start(ready=False)
    assert second.process is not None
    assert await asyncio.wait_for(second.process.wait(), 60) == 1
    assert "already running" in second.log()
    assert first.alive
    assert await first.stop() == 0
    [session] = read_sessions(first.workspace)
    assert all(r.startswith("Error:") for r in session.texts("tool"))


@contextmanager
def umask(mask: int) -> Iterator[None]:
    """Child processes started inside inherit this umask."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


async def cli(*args: str, home: Path, env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", *args),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **env, "MEMGATE_HOME": str(home), "HOME": str(home)},
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


def modes(*roots: Path) -> dict[str, str]:
    """Every file and folder under the roots (and the roots) whose mode is not owner-only."""
    loose: dict[str, str] = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                continue
            wanted = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
            if stat.S_IMODE(info.st_mode) != wanted:
                loose[str(path)] = oct(stat.S_IMODE(info.st_mode))
    return loose


async def test_everything_init_chat_and_run_create_is_owner_only(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Under umask 022, every file init, chat and run create is 0600 and every folder 0700."""
    gateway = make_gateway({"memory": {"window": 4}})
    home, workspace, state = gateway.home, gateway.workspace, gateway.state_dir
    env = {**SECRETS}
    note = f"memory/{datetime.now(UTC).date().isoformat()}.md"
    with umask(0o022):
        home.mkdir(parents=True)
        os.chmod(home, 0o700)
        config = home / "config.yaml"
        code, out = await cli("init", "--config", str(config), home=home, env=env)
        assert code == 0, out
        # chat: a daily note, a MEMORY.md rewrite (a version), the search index.
        gateway.config_path.write_text(json.dumps(gateway.config()))
        fake_llm.push(
            parallel(
                tool_call("write_file", {"path": note, "content": "today"}),
                tool_call("write_file", {"path": "memory/MEMORY.md", "content": "# facts\n"}),
                tool_call("memory_search", {"query": "facts"}),
            )
        )
        fake_llm.push(text("noted"))
        code, out = await cli(
            "chat", "--config", str(gateway.config_path), "-m", "note this", home=home, env=env
        )
        assert code == 0, out
        # run: a DM with a photo, a group message, enough turns to consolidate.
        await gateway.start()
        photo = fake_telegram.add_file(b"\xff\xd8", file_id="p", unique_id="U1", path="p/a.jpg")
        fake_telegram.message(None, photo=[{**photo, "width": 1, "height": 1}], caption="look")
        for number in range(4):
            fake_telegram.message(f"message {number}")
        fake_telegram.message("hello group", chat_id=-100, reply_to_bot=True)
        await fake_telegram.wait_sent(6, within=60)
        await until(lambda: fake_llm.consolidation_requests() != [], 30, "a consolidation")
        assert await gateway.stop() == 0

    assert (workspace / "media" / "telegram" / "42" / "U1.jpg").is_file()
    assert (workspace / note).is_file() and list((workspace / "memory" / "versions").iterdir())
    assert (state / "index" / "memory.db").is_file() and (state / "memgate.lock").is_file()
    assert (workspace / "sessions" / "telegram:-100.jsonl").is_file()
    assert (home / "config.yaml").is_file() and (home / "workspace" / "USER.md").is_file()
    # home holds what init wrote (config, its workspace); the harness's own files sit beside it.
    assert modes(home, workspace, state) == {}


async def test_a_name_already_in_the_state_folder_is_never_overwritten(
    tmp_path: Path, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """Both copies of a state file are kept; a stale old index is dropped, the new one stays."""
    config = build_config(tmp_path / "workspace", fake_llm.url)
    await old_layout(config.workspace)
    name = f"telegram-{BOT['id']}.json"
    (config.state_dir / "index").mkdir(parents=True)
    (config.state_dir / "index" / "memory.db").write_bytes(b"the new index")
    (config.state_dir / name).write_text('{"last_update_id": 950}')
    async with open_runtime(config):
        pass
    assert (config.state_dir / name).read_text() == '{"last_update_id": 950}'
    assert (config.state_dir / f"{name}.from-workspace").read_text() == '{"last_update_id": 899}'
    assert (config.state_dir / "index" / "memory.db").read_bytes() == b"the new index"
    assert not list(config.state_dir.glob("index.*"))  # the stale index is not kept beside
    assert not (config.workspace / ".state").exists() and not (config.workspace / ".index").exists()
    assert "the workspace's copy is kept as" in caplog.text


@pytest.mark.parametrize("inside", ["state_in_workspace", "workspace_in_state"])
async def test_state_and_workspace_must_be_apart(
    tmp_path: Path, fake_llm: FakeLLM, inside: str
) -> None:
    """A state folder inside the workspace (or around it) is a configuration error naming state_dir."""
    workspace = tmp_path / "home" / "workspace"
    state = workspace / "state" if inside == "state_in_workspace" else tmp_path / "home"
    config = build_config(workspace, fake_llm.url, {"state_dir": str(state)})
    with pytest.raises(ConfigError, match="state_dir"):
        async with open_runtime(config):
            pass


def test_the_terminal_history_moves_to_the_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/.memgate/chat_history` of an older memgate moves to the state folder, owner-only."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "chat_history").write_text("hello\n")
    os.chmod(home / "chat_history", 0o644)
    monkeypatch.setenv("MEMGATE_HOME", str(home))
    config = build_config(home / "workspace", "http://127.0.0.1:9/v1")
    path = chat_history_path(config)
    assert path == config.state_dir / "chat_history" and path.read_text() == "hello\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and not (home / "chat_history").exists()
