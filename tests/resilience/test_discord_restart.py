"""Discord messages survive a stop: one queued behind a slow turn is answered once after a restart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.fakes.discord_api import ALICE, BOT_ID, DM, FakeDiscord
from tests.fakes.llm import FakeLLM, last_user_text, text
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import Gateway, read_sessions, until


def discord_settings(fake: FakeDiscord, gateway_root: Any) -> dict[str, Any]:
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


async def start_on_discord(gateway: Gateway) -> None:
    """Start `memgate run` and wait until its Discord connection is up."""
    await gateway.start(ready=False)

    async def connected() -> bool:
        health = await gateway.health()
        return bool(health and health["channels"]["discord"]["connected"])

    deadline = asyncio.get_running_loop().time() + 30
    while not await connected():
        assert gateway.alive, gateway.log()[-3000:]
        assert asyncio.get_running_loop().time() < deadline, "Discord never connected"
        await asyncio.sleep(0.1)


def replies(fake: FakeDiscord, content: str) -> int:
    return sum(1 for body in fake.sent(DM) if body.get("content") == content)


async def answered(fake: FakeDiscord, content: str) -> None:
    """Send Alice's DM and wait for its echo: everything sent before has been looked at."""
    await fake.send_message(DM, ALICE, content)
    await fake.wait_for(lambda: replies(fake, f"echo: {content}") >= 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
async def test_a_queued_message_is_answered_once_after_a_restart(
    how: str, make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path
) -> None:
    """A message waiting behind a slow turn is journaled on arrival and answered once after restart."""
    gateway = make_gateway(discord_settings(fake_discord, tmp_path))
    await start_on_discord(gateway)
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
    await start_on_discord(gateway)
    await fake_discord.wait_for(lambda: replies(fake_discord, "echo: queued question") >= 1)
    await answered(fake_discord, "after the restart")
    assert await gateway.stop() == 0
    await start_on_discord(gateway)  # a second restart answers nothing again
    await answered(fake_discord, "after the second restart")
    assert await gateway.stop() == 0
    assert replies(fake_discord, "echo: queued question") == 1
    users = [t for s in read_sessions(gateway.workspace) for t in s.texts("user")]
    assert users.count("queued question") == 1 and users.count("slow question") == 1
