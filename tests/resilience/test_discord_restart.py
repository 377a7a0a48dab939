"""Discord messages survive a stop: one queued behind a slow turn is answered once after a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_api import ALICE, BOT_ID, DM, FakeDiscord
from tests.fakes.llm import FakeLLM, last_user_text, text, tool_call
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import Gateway, read_sessions, until


def discord_settings(fake: FakeDiscord, gateway_root: Path) -> dict[str, Any]:
    return {
        "state_dir": str(gateway_root / "state"),
        "channels": {
            "telegram": {"enabled": False},
            "discord": {
                "enabled": True,
                "token": fake.token,
                "allow_from": [ALICE["id"]],
                "api_base": fake.api_base,
                "gateway_url": fake.gateway_url,
            },
        },
    }


async def start_on_discord(gateway: Gateway, fake: FakeDiscord) -> None:
    """Start `memgate run` and wait until Discord has made its session ready, so that a message
    reaches it (discord.py reports the connection itself only after a further 2 s)."""
    readies = fake.readies
    await gateway.start(ready=False)
    await until(lambda: fake.readies > readies or not gateway.alive, 30, "a Discord session")
    assert gateway.alive, gateway.log()[-3000:]


def replies(fake: FakeDiscord, content: str) -> int:
    return sum(1 for body in fake.sent(DM) if body.get("content") == content)


async def answered(fake: FakeDiscord, content: str) -> None:
    """Send Alice's DM and wait for its echo: everything sent before has been looked at."""
    await fake.send_message(DM, ALICE, content)
    await fake.wait_for(lambda: replies(fake, f"echo: {content}") >= 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_a_queued_message_is_answered_once_after_a_restart(
    how: str,
    make_gateway: GatewayFactory,
    fake_llm: FakeLLM,
    fake_discord: FakeDiscord,
    tmp_path: Path,
) -> None:
    """A message waiting behind a slow turn is journaled on arrival and answered once after restart."""
    gateway = make_gateway(discord_settings(fake_discord, tmp_path))
    await start_on_discord(gateway, fake_discord)
    release = asyncio.Event()
    fake_llm.push(
        text("the slow answer"),
        hold=release,
        match=lambda body: last_user_text(body) == "slow question",
    )
    await fake_discord.send_message(DM, ALICE, "slow question")
    await fake_llm.wait_for_requests(1, "chat")
    queued = await fake_discord.send_message(DM, ALICE, "queued question")
    inbox = tmp_path / "state" / f"discord-{BOT_ID}-inbox.jsonl"
    await until(
        lambda: inbox.exists() and queued["id"] in inbox.read_text(),
        20,
        "the queued message to be journaled",
    )
    if how == "SIGTERM":
        assert await gateway.stop() == 0
    else:
        await gateway.kill()
    release.set()
    assert replies(fake_discord, "echo: queued question") == 0
    await start_on_discord(gateway, fake_discord)
    await fake_discord.wait_for(lambda: replies(fake_discord, "echo: queued question") >= 1)
    await answered(fake_discord, "after the restart")
    assert await gateway.stop() == 0
    await start_on_discord(gateway, fake_discord)  # a second restart answers nothing again
    await answered(fake_discord, "after the second restart")
    assert await gateway.stop() == 0
    assert replies(fake_discord, "echo: queued question") == 1
    users = [t for s in read_sessions(gateway.workspace) for t in s.texts("user")]
    assert users.count("queued question") == 1 and users.count("slow question") == 1


@pytest.mark.timeout(120)
async def test_on_discord_an_unsent_answer_and_a_cut_tool_turn_are_finished_after_a_kill(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    """SIGKILLed with one answer stored but not taken by Discord, the answer arrives once after the
    restart; SIGKILLed after a tool's result is stored, the turn is answered without running the
    tool again."""
    gateway = make_gateway(discord_settings(fake_discord, tmp_path))
    await start_on_discord(gateway, fake_discord)
    fake_discord.send_hold = asyncio.Event()  # Discord never takes it: the kill comes first
    fake_llm.push(text("the owed answer"), match=lambda body: last_user_text(body) == "owe me")
    await fake_discord.send_message(DM, ALICE, "owe me")
    await fake_discord.wait_for(lambda: fake_discord.held == 1)
    await gateway.kill()
    fake_discord.send_hold = None  # the held request stays unanswered: it never counts as sent
    await start_on_discord(gateway, fake_discord)
    await fake_discord.wait_for(lambda: replies(fake_discord, "the owed answer") == 1)

    (gateway.workspace / "runs.md").write_text("runs:")
    edit = {"path": "runs.md", "old_text": "runs:", "new_text": "runs: ran"}

    def asked(body: dict[str, Any]) -> bool:
        return last_user_text(body) == "count a run"

    fake_llm.push(tool_call("edit_file", edit), match=asked)
    release = asyncio.Event()
    fake_llm.push(text("lost with the process"), hold=release, match=asked)
    await fake_discord.send_message(DM, ALICE, "count a run")
    await until(lambda: len([b for b in fake_llm.chat_requests() if asked(b)]) == 2, 20, "step 2")
    await gateway.kill()
    release.set()
    fake_llm.push(text("counted"), match=asked)
    await start_on_discord(gateway, fake_discord)
    # In the message that showed the tool step before the kill: edited, not posted again.
    await fake_discord.wait_for(lambda: fake_discord.shown(DM).count("counted") == 1)
    await answered(fake_discord, "anything else?")
    assert await gateway.stop() == 0
    assert replies(fake_discord, "the owed answer") == 1
    assert fake_discord.shown(DM).count("counted") == 1
    assert (gateway.workspace / "runs.md").read_text() == "runs: ran"
    assert len([b for b in fake_llm.chat_requests() if last_user_text(b) == "owe me"]) == 1


@pytest.mark.timeout(120)
async def test_on_discord_an_answer_made_but_unconfirmed_before_a_kill_is_not_posted_twice(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    """Discord made the answer but its reply was lost to a SIGKILL: after the restart the answer is
    sent again with the same nonce, and Discord, deduplicating by it, keeps one message."""
    gateway = make_gateway(discord_settings(fake_discord, tmp_path))
    await start_on_discord(gateway, fake_discord)
    fake_discord.answer_hold = asyncio.Event()  # the message is made; the answer never comes
    fake_llm.push(text("made once"), match=lambda body: last_user_text(body) == "once please")
    await fake_discord.send_message(DM, ALICE, "once please")
    await fake_discord.wait_for(lambda: fake_discord.held == 1)
    await gateway.kill()
    fake_discord.answer_hold = None
    await start_on_discord(gateway, fake_discord)
    await answered(fake_discord, "anything else?")  # the replay has been dealt with by then
    assert await gateway.stop() == 0
    posts = [
        r.body
        for r in fake_discord.requests
        if r.method == "POST" and isinstance(r.body, dict) and r.body.get("content") == "made once"
    ]
    assert len(posts) == 2 and posts[0]["nonce"] == posts[1]["nonce"]  # sent again, same nonce
    assert replies(fake_discord, "made once") == 1
    assert len([b for b in fake_llm.chat_requests() if last_user_text(b) == "once please"]) == 1
