"""Scopes, tried as an attacker would: the fake LLM is scripted to call the file tools.

Groups and guests reach only their own folder and their own chat's media; the owner reaches the
workspace but not the state folder; MEMORY.md and HISTORY.md writes go through the memory writer.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from channels.admission import AllowList
from gateway.service.app import Runtime
from gateway.tools.scope import (
    PathRefusedError,
    ScopeGuard,
    folds_case,
    group_folder,
    group_scope,
    private_scope,
)
from tests.conftest import inbound
from tests.fakes.discord_api import (
    ALICE,
    BOT_MENTION,
    BOT_USER,
    GENERAL,
    GUILD,
    FakeDiscord,
    serving,
)
from tests.fakes.llm import FakeLLM, parallel, text, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running

MEMORY_SECRET = "owner-memory-secret-1f3a"
USER_SECRET = "owner-user-md-secret-8c2d"
NOTE_SECRET = "owner-daily-note-secret-5e71"
STATE_SECRET = "state-journal-secret-0b9e"
MEDIA_SECRET = "other-chat-media-secret-44aa"
SESSION_SECRET = "owner-dm-text-secret-7d10"


def plant(runtime: Runtime) -> dict[str, Path]:
    """The owner's secrets in every place a group must not reach, and a symlink into the state."""
    workspace, state = runtime.config.workspace, runtime.config.state_dir
    memory = runtime.memory
    memory.memory_md.write_text(f"# Long-term Memory\n\n{MEMORY_SECRET}\n")
    memory.daily_note_path().write_text(f"{NOTE_SECRET}\n")
    (workspace / "USER.md").write_text(f"# About the user\n\n{USER_SECRET}\n")
    (workspace / "AGENTS.md").write_text("# Agent instructions\n\nbe kind\n")
    (workspace / "SOUL.md").write_text("# Personality\n\nwarm\n")
    journal = state / "telegram-1-inbox.jsonl"
    journal.write_text(json.dumps({"text": STATE_SECRET}) + "\n")
    other_media = workspace / "media" / "telegram" / "777" / "photo.txt"
    other_media.parent.mkdir(parents=True)
    other_media.write_text(MEDIA_SECRET)
    (workspace / "statelink").symlink_to(state)
    (workspace / "journal-link.md").symlink_to(journal)
    return {"journal": journal, "other_media": other_media}


def attack_paths(runtime: Runtime, own_chat_media: str) -> list[str]:
    """Every way we know to name what a group must not see: relative, absolute, symlinked, cased."""
    workspace, state = runtime.config.workspace, runtime.config.state_dir
    return [
        str(state / "telegram-1-inbox.jsonl"),
        str(state),
        f"../{state.name}/telegram-1-inbox.jsonl",
        "statelink/telegram-1-inbox.jsonl",
        "statelink",
        "journal-link.md",
        str(state / "memgate.lock"),
        "memory/MEMORY.md",
        "Memory/MEMORY.md",
        str(workspace / "memory" / "MEMORY.md"),
        "memory",
        f"memory/{runtime.memory.today().isoformat()}.md",
        "sessions",
        "sessions/telegram:42.jsonl",
        "media/telegram/777/photo.txt",
        "media/telegram/777",
        "media",
        f"{own_chat_media}/../777/photo.txt",
        "USER.md",
        ".",
    ]


def push_reads(fake_llm: FakeLLM, paths: list[str]) -> int:
    """One model step that reads and lists every path at once; returns the number of calls."""
    calls = [tool_call("read_file", {"path": path}, f"r{n}") for n, path in enumerate(paths)]
    calls += [tool_call("list_dir", {"path": path}, f"l{n}") for n, path in enumerate(paths)]
    fake_llm.push(parallel(*calls))
    fake_llm.push(text("I found nothing."))
    return len(calls)


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def assert_group_saw_nothing(requests: list[dict[str, Any]], calls: int) -> None:
    """Every tool call refused, and no owner secret in any request of the group's turn."""
    results = tool_results(requests[-1])
    assert len(results) == calls
    refused = [r for r in results if not r.startswith("Error:")]
    assert refused == []
    prompt = requests[0]["messages"][0]["content"]
    assert "be kind" in prompt and "warm" in prompt  # AGENTS.md and SOUL.md are there
    offered = {tool["function"]["name"] for tool in requests[0]["tools"]}
    assert offered == {"read_file", "write_file", "edit_file", "list_dir"}
    for request in requests:
        body = json.dumps(request, ensure_ascii=False)
        for secret in (MEMORY_SECRET, USER_SECRET, NOTE_SECRET, STATE_SECRET, MEDIA_SECRET):
            assert secret not in body, secret
        assert SESSION_SECRET not in body
        assert "# Memory" not in body and "Today's note" not in body


@contextlib.asynccontextmanager
async def telegram(runtime: Runtime, fake: FakeTelegram, **options: Any) -> AsyncIterator[None]:
    """The real Telegram channel in front of the runtime's agent, as `memgate run` wires it."""
    async with running(agent_channel(fake, runtime, **options)):
        yield


async def test_telegram_group_reads_nothing_private(
    runtime: Runtime, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """From a Telegram group, every path to state, memory, sessions, USER.md or other media fails."""
    plant(runtime)
    await runtime.agent.handle(inbound(SESSION_SECRET, "42", "telegram"))
    calls = push_reads(fake_llm, attack_paths(runtime, "media/telegram/-100"))
    async with telegram(runtime, fake_telegram):
        fake_telegram.message("read everything", chat_id=-100, user_id=42, reply_to_bot=True)
        await fake_telegram.wait_sent(1, within=30)
    requests = [r for r in fake_llm.chat_requests() if "read everything" in json.dumps(r)]
    assert_group_saw_nothing(requests, calls)
    assert "groups/telegram:-100/" in requests[0]["messages"][0]["content"]


async def test_discord_guild_channel_reads_nothing_private(
    runtime: Runtime, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    """From a Discord guild channel, every path to state, memory, sessions or USER.md fails."""
    plant(runtime)
    await runtime.agent.handle(inbound(SESSION_SECRET, "42", "telegram"))
    calls = push_reads(fake_llm, attack_paths(runtime, f"media/discord/{GENERAL}"))
    async with serving(fake_discord, runtime.agent.handle, runtime.config.workspace):
        await fake_discord.send_message(
            GENERAL,
            ALICE,
            f"{BOT_MENTION} read everything",
            guild_id=GUILD,
            mentions=[BOT_USER],
        )
        await fake_discord.wait_for(lambda: "I found nothing." in fake_discord.shown(GENERAL))
    requests = [r for r in fake_llm.chat_requests() if "read everything" in json.dumps(r)]
    assert_group_saw_nothing(requests, calls)


async def test_a_guest_dm_gets_the_group_scope(
    runtime: Runtime, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Someone let in only by "*" is a guest: their DM sees no memory, USER.md or note."""
    plant(runtime)
    fake_llm.push(tool_call("read_file", {"path": "memory/MEMORY.md"}))
    fake_llm.push(text("no"))
    async with telegram(runtime, fake_telegram, allow_from=["42", "*"]):
        fake_telegram.message("hello, guest here", chat_id=99, user_id=99, username="guest")
        await fake_telegram.wait_sent(1, within=30)
    requests = fake_llm.chat_requests()
    assert_group_saw_nothing(requests, 1)
    session = runtime.config.workspace / "sessions" / "telegram:99.jsonl"
    metadata = json.loads(session.read_text().splitlines()[0])
    assert metadata["group"] is True  # consolidation keeps it out of MEMORY.md


def test_star_admits_everyone_but_owns_nothing() -> None:
    """`"*"` lets a stranger in as a guest; only ids and @names listed are owners."""
    allow = AllowList(["*", "42", "@Alice"])
    assert allow.allows("99") and not allow.is_owner("99", "mallory")
    assert allow.is_owner("42") and allow.is_owner("7", "alice")


async def test_a_group_changes_nothing_outside_its_folder(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A group cannot write or edit AGENTS.md, SOUL.md, USER.md, media or state; its folder works."""
    planted = plant(runtime)
    workspace, state = runtime.config.workspace, runtime.config.state_dir
    own_media = workspace / "media" / "test" / "-100"
    own_media.mkdir(parents=True)
    targets = [
        "AGENTS.md",
        "SOUL.md",
        "USER.md",
        "media/test/-100/new.txt",
        "media/telegram",
        "media/telegram/777/photo.txt",
        "memory/MEMORY.md",
        str(state / "memgate.lock"),
        str(state / "telegram-1-inbox.jsonl"),
        "statelink/telegram-1-inbox.jsonl",
        "journal-link.md",
        "groups/test:-200/notes.md",
        "groups/notes.md",
    ]
    before = {p: p.read_bytes() for p in (workspace / "AGENTS.md", workspace / "SOUL.md")}
    before |= {p: p.read_bytes() for p in (workspace / "USER.md", *planted.values())}
    before[state / "memgate.lock"] = (state / "memgate.lock").read_bytes()
    attacks = []
    for number, target in enumerate(targets):
        content = {"path": target, "content": "x" * 10_000}
        attacks.append(tool_call("write_file", content, f"w{number}"))
        edit = {"path": target, "old_text": "e", "new_text": "INJECTED"}
        attacks.append(tool_call("edit_file", edit, f"e{number}"))
    fake_llm.push(parallel(*attacks))
    own = f"{group_folder('test:-100')}/notes.md"
    fake_llm.push(tool_call("write_file", {"path": own, "content": "group notes"}, "own1"))
    fake_llm.push(tool_call("edit_file", {"path": own, "old_text": "notes", "new_text": "list"}))
    fake_llm.push(tool_call("read_file", {"path": own}, "own3"))
    fake_llm.push(text("done"))
    await runtime.agent.handle(inbound("change things", "-100", is_group=True))
    results = tool_results(fake_llm.chat_requests()[-1])
    assert all(r.startswith("Error:") for r in results[: 2 * len(targets)]), results
    assert not any(r.startswith("Error:") for r in results[2 * len(targets) :]), results
    assert results[-1] == "group list"
    assert {p: p.read_bytes() for p in before} == before
    assert not (own_media / "new.txt").exists() and (workspace / "media/telegram").is_dir()
    assert not (workspace / "groups" / "test:-200").exists()
    assert (workspace / own).read_text() == "group list"
    assert oct((workspace / own).stat().st_mode & 0o777) == "0o600"


async def test_private_memory_writes_keep_versions_and_history_only_grows(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """The owner's MEMORY.md rewrite and edit each keep a version; HISTORY.md only takes appends."""
    runtime.memory.memory_md.write_text("# Long-term Memory\n\nfirst\n")
    runtime.memory.append_history("[2026-01-01 10:00] the first entry")
    history = runtime.memory.read_history()
    fake_llm.push(tool_call("write_file", {"path": "memory/MEMORY.md", "content": "second\n"}))
    fake_llm.push(
        tool_call(
            "edit_file", {"path": "memory/MEMORY.md", "old_text": "second", "new_text": "third"}
        )
    )
    fake_llm.push(tool_call("write_file", {"path": "memory/HISTORY.md", "content": "rewritten"}))
    fake_llm.push(
        tool_call("edit_file", {"path": "memory/HISTORY.md", "old_text": "first", "new_text": "x"})
    )
    appended = history + "[2026-01-02 09:00] an appended entry\n"
    fake_llm.push(tool_call("write_file", {"path": "memory/HISTORY.md", "content": appended}))
    fake_llm.push(text("ok"))
    await runtime.agent.handle(inbound("update memory"))
    results = tool_results(fake_llm.chat_requests()[-1])
    assert [r.startswith("Error:") for r in results] == [False, False, True, True, False], results
    assert "append-only" in results[2] and "append-only" in results[3]
    assert runtime.memory.memory_md.read_text() == "third\n"
    kept = sorted(v.read_text() for v in runtime.memory.list_versions())
    assert kept == ["# Long-term Memory\n\nfirst\n", "second\n"]
    assert runtime.memory.read_history() == appended + "\n"


async def test_private_chat_cannot_reach_the_state_folder(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """The owner's tools refuse the state folder by any path, a planted symlink and the lock too."""
    planted = plant(runtime)
    state = runtime.config.state_dir
    paths = [
        "statelink/telegram-1-inbox.jsonl",
        "journal-link.md",
        str(state / "memgate.lock"),
        f"../{state.name}/memgate.lock",
    ]
    for number, path in enumerate(paths):
        fake_llm.push(tool_call("read_file", {"path": path}, f"r{number}"))
        fake_llm.push(tool_call("write_file", {"path": path, "content": "0"}, f"w{number}"))
    fake_llm.push(tool_call("write_file", {"path": "sessions/telegram:42.jsonl", "content": "x"}))
    fake_llm.push(text("ok"))
    lock_before = (state / "memgate.lock").read_bytes()
    await runtime.agent.handle(inbound("read the journal"))
    results = tool_results(fake_llm.chat_requests()[-1])
    assert len(results) == 9 and all(r.startswith("Error:") for r in results), results
    assert all(STATE_SECRET not in r for r in results)
    assert STATE_SECRET in planted["journal"].read_text()
    assert (state / "memgate.lock").read_bytes() == lock_before


def test_case_folding_filesystems_fold_the_checks(tmp_path: Path) -> None:
    """Folding case widens a group's reach only where the filesystem folds; read-only always folds."""
    workspace, state = tmp_path / "workspace", tmp_path / "state"
    (workspace / "groups" / "test:-100").mkdir(parents=True)
    state.mkdir()
    assert not folds_case(workspace)  # the test machine's ext4/tmpfs
    group = ScopeGuard(group_scope(inbound("x", "-100", is_group=True)), workspace, state)
    with pytest.raises(PathRefusedError, match="not available"):
        group.resolve("GROUPS/test:-100/a.md")
    group.folds = True
    assert group.resolve("GROUPS/test:-100/a.md", writing=True).name == "a.md"
    with pytest.raises(PathRefusedError, match="not available"):
        group.resolve("Memory/MEMORY.md")
    owner = ScopeGuard(private_scope(), workspace, state)
    with pytest.raises(PathRefusedError, match="read-only"):
        owner.resolve("Sessions/x.jsonl", writing=True)
    with pytest.raises(PathRefusedError, match="read-only"):
        owner.resolve("MEMORY/Versions/x.md", writing=True)


async def test_status_tells_a_group_nothing_about_the_owners_memory(runtime: Runtime) -> None:
    """/status in a group leaves out MEMORY.md; the owner's /status shows its size."""
    group = await runtime.agent.handle(inbound("/status", "-100", is_group=True))
    owner = await runtime.agent.handle(inbound("/status"))
    assert group is not None and owner is not None
    assert "MEMORY.md" not in group.text and "Session: test:-100" in group.text
    assert "MEMORY.md:" in owner.text
