"""Slack messages survive a kill: one taken from Socket Mode (acknowledged, journaled) but not
yet answered is answered once after a restart, and Slack's retries of it are not answered again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLM, last_user_text, text
from tests.fakes.slack_api import ALICE, BOT_USER, DM, FakeSlack, fake_slack
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import Gateway, read_sessions, until


def slack_settings(fake: FakeSlack, gateway_root: Path) -> dict[str, Any]:
    return {
        "state_dir": str(gateway_root / "state"),
        "channels": {
            "telegram": {"enabled": False},
            "slack": {
                "enabled": True,
                "token": fake.token,
                "app_token": fake.app_token,
                "api_base": fake.api_base,
                "allow_from": [ALICE],
                "streaming": "off",
            },
        },
    }


async def start_on_slack(gateway: Gateway, fake: FakeSlack) -> None:
    """Start `memgate run` and wait until its Socket Mode connection is open."""
    connections = fake.connections
    await gateway.start(ready=False)
    await until(lambda: fake.connections > connections or not gateway.alive, 30, "Socket Mode")
    assert gateway.alive, gateway.log()[-3000:]


async def answered(fake: FakeSlack, content: str) -> None:
    """Send Alice's DM and wait for its echo: everything sent before has been looked at."""
    await fake.say(DM, ALICE, content)
    await fake.wait_for(lambda: f"echo: {content}" in fake.texts(DM))


@pytest.mark.timeout(120)
async def test_a_message_taken_but_unanswered_is_answered_once_after_a_kill(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """SIGKILLed after Slack's event was acknowledged and journaled but before its answer, the
    message is answered once at the next start; a later restart answers nothing again."""
    async with fake_slack() as fake:
        gateway = make_gateway(slack_settings(fake, tmp_path))
        await start_on_slack(gateway, fake)
        release = asyncio.Event()
        fake_llm.push(
            text("the slow answer"),
            hold=release,
            match=lambda body: last_user_text(body) == "slow question",
        )
        await fake.say(DM, ALICE, "slow question")
        await fake_llm.wait_for_requests(1, "chat")
        queued = await fake.push_message(DM, ALICE, "queued question")
        inbox = tmp_path / "state" / f"slack-{BOT_USER}-inbox.jsonl"
        await until(
            lambda: inbox.exists() and "queued question" in inbox.read_text() and queued.acked,
            20,
            "the queued message to be journaled and acknowledged",
        )
        await gateway.kill()
        release.set()
        assert "echo: queued question" not in fake.texts(DM)
        await start_on_slack(gateway, fake)
        await fake.wait_for(lambda: "echo: queued question" in fake.texts(DM))
        await answered(fake, "after the restart")
        assert await gateway.stop() == 0
        await start_on_slack(gateway, fake)  # a second restart answers nothing again
        await answered(fake, "after the second restart")
        assert await gateway.stop() == 0
    assert fake.texts(DM).count("echo: queued question") == 1
    users = [t for s in read_sessions(gateway.workspace) for t in s.texts("user")]
    assert users.count("queued question") == 1 and users.count("slow question") == 1


@pytest.mark.timeout(120)
async def test_a_retried_event_of_a_journaled_message_is_not_answered_twice(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """SIGKILLed after journaling a message whose acknowledgement Slack never got, the restart
    meets it twice (the journal, and Slack sending the event again) and answers it once."""
    async with fake_slack(ack_timeout=60) as fake:  # sent again on the next connection only
        gateway = make_gateway(slack_settings(fake, tmp_path))
        await start_on_slack(gateway, fake)
        release = asyncio.Event()
        fake_llm.push(
            text("the slow answer"),
            hold=release,
            match=lambda body: last_user_text(body) == "slow question",
        )
        await fake.say(DM, ALICE, "slow question")
        await fake_llm.wait_for_requests(1, "chat")
        fake.ignore_acks = 1  # the queued message's acknowledgement is lost on the way
        queued = await fake.push_message(DM, ALICE, "queued question")
        inbox = tmp_path / "state" / f"slack-{BOT_USER}-inbox.jsonl"
        await until(
            lambda: inbox.exists() and "queued question" in inbox.read_text(),
            20,
            "the queued message to be journaled",
        )
        await fake.wait_for(lambda: fake.ignore_acks == 0)
        await gateway.kill()
        release.set()
        await start_on_slack(gateway, fake)
        await fake.wait_for(lambda: queued.acked and "echo: queued question" in fake.texts(DM))
        await answered(fake, "after the restart")
        assert await gateway.stop() == 0
    assert queued.attempts == 2  # Slack sent it again, to the restarted process
    assert fake.texts(DM).count("echo: queued question") == 1
    users = [t for s in read_sessions(gateway.workspace) for t in s.texts("user")]
    assert users.count("queued question") == 1
