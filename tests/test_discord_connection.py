"""The Discord channel's connection: resume after a drop, 429s, login failures, send failures.

The real discord.py against the fake Discord on loopback; message handling is in test_discord.py.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from channels.base import ChannelConfigError
from channels.discord.channel import DiscordChannel
from channels.discord.connect import DiscordChannelError
from gateway.bus import Handler, InboundMessage, OutboundMessage
from gateway.config.models import DiscordConfig
from tests.fakes import discord_api as fd
from tests.fakes.discord_api import ALICE, DM, FakeDiscord, Recorder, barrier, serving


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    """The shared fake Discord (tests/conftest.py) under this module's short name."""
    return fake_discord


def make_channel(
    fake: FakeDiscord, workspace: Path, handler: Handler | None = None, **options: Any
) -> DiscordChannel:
    settings = DiscordConfig(
        token=fake.token,
        allow_from=[ALICE["id"]],
        dm_policy="allowlist",
        api_base=fake.api_base,
        gateway_url=fake.gateway_url,
    )
    return DiscordChannel(
        handler or Recorder(), settings, workspace=workspace, guild_ready_timeout=0.05, **options
    )


async def test_message_sent_while_disconnected_arrives_once_after_resume(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    """After a close with 4000 the client resumes the session and answers the missed message once."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path) as channel:
        await fake.drop(4000)
        await fake.send_message(DM, ALICE, "did you miss me?")
        await fake.wait_for(lambda: fake.sent(DM))
        await barrier(fake)
        await fd.eventually(lambda: channel.connected)
    assert [m["content"] for m in fake.sent(DM)] == ["echo: did you miss me?"]
    assert [m.text for m in handler.inbound if m.chat_id == str(DM)] == ["did you miss me?"]
    assert (len(fake.identifies), len(fake.resumes), fake.connections) == (1, 1, 2)


async def test_connected_follows_the_connection(fake: FakeDiscord, tmp_path: Path) -> None:
    """`connected` is false before start, true once ready, false again after the channel stops."""
    channel = make_channel(fake, tmp_path)
    assert not channel.connected
    task = asyncio.create_task(channel.run())
    await fd.eventually(lambda: channel.connected)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not channel.connected


async def test_429_is_honoured_and_the_reply_arrives_once(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    """A 429 on sending waits retry_after, retries, and delivers the reply exactly once."""
    fake.rate_limit("POST", f"/channels/{DM}/messages", retry_after=0.3)
    async with serving(fake, Recorder(), tmp_path):
        await fake.send_message(DM, ALICE, "busy?")
        await fake.wait_for(lambda: fake.sent(DM))
        await barrier(fake)
    attempts = fake.calls("POST", f"/channels/{DM}/messages")
    assert [a.status for a in attempts] == [429, 200]
    assert attempts[1].at - attempts[0].at >= 0.3 * 0.9  # loop clock granularity
    assert [m["content"] for m in fake.sent(DM)] == ["echo: busy?"]


async def test_send_failure_is_logged_and_the_channel_goes_on(
    fake: FakeDiscord, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A reply Discord refuses (403) is logged; the next message is answered normally."""
    fake.fail("POST", f"/channels/{DM}/messages", status=403)
    async with serving(fake, Recorder(), tmp_path):
        await fake.send_message(DM, ALICE, "first")
        await fake.wait_for(lambda: fake.calls("POST", f"/channels/{DM}/messages"))
        await fake.send_message(DM, ALICE, "second")
        await fake.wait_for(lambda: fake.sent(DM))
    assert [m["content"] for m in fake.sent(DM)] == ["echo: second"]
    assert any("discord send failed" in r.getMessage() for r in caplog.records)


async def test_rejected_token_stops_the_channel_with_a_clear_error(
    fake: FakeDiscord, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 401 at login raises DiscordChannelError naming the setting, never the token itself."""
    caplog.set_level(logging.DEBUG)
    fake.login_statuses.append(401)
    with pytest.raises(DiscordChannelError, match=r"channels\.discord\.token") as failure:
        await make_channel(fake, tmp_path).run()
    assert fake.token not in str(failure.value)
    assert fake.token not in caplog.text


async def test_missing_message_content_intent_is_explained(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    """A gateway close 4014 (intent not enabled) raises an error telling where to enable it."""
    fake.close_on_identify = 4014
    with pytest.raises(DiscordChannelError, match="MESSAGE CONTENT intent"):
        await make_channel(fake, tmp_path).run()


async def test_login_is_retried_through_a_discord_outage(fake: FakeDiscord, tmp_path: Path) -> None:
    """A 503 at login is retried with backoff until Discord answers."""
    fake.login_statuses.append(503)
    async with serving(fake, Recorder(), tmp_path) as channel:
        assert channel.connected
    assert [r.status for r in fake.calls("GET", "/users/@me")] == [503, 200]


async def test_run_twice_raises(fake: FakeDiscord, tmp_path: Path) -> None:
    """A channel is started once; a second run() is a programming error."""
    async with serving(fake, Recorder(), tmp_path) as channel:
        with pytest.raises(RuntimeError, match="already started"):
            await channel.run()


def test_an_empty_token_is_refused_at_construction(tmp_path: Path) -> None:
    """A blank token fails when the channel is built, naming the key (the models check the rest)."""
    settings = DiscordConfig(token=" ", allow_from=[], dm_policy="allowlist")
    with pytest.raises(ChannelConfigError, match=r"channels\.discord\.token"):
        DiscordChannel(Recorder(), settings, workspace=tmp_path)


@pytest.mark.parametrize(("grace", "replied"), [(5.0, True), (0.0, False)])
async def test_running_turn_may_finish_within_the_shutdown_grace(
    fake: FakeDiscord, tmp_path: Path, grace: float, replied: bool
) -> None:
    """On stop, a running turn still sends its reply within shutdown_grace; with none it is cut."""
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(message: InboundMessage, stream: object = None) -> OutboundMessage:
        started.set()
        await release.wait()
        return OutboundMessage("discord", message.chat_id, "made it")

    channel = make_channel(fake, tmp_path, slow, shutdown_grace=grace)
    task = asyncio.create_task(channel.run())
    await fd.eventually(lambda: channel.connected)
    await fake.send_message(DM, ALICE, "take your time")
    async with asyncio.timeout(fd.WAIT):
        await started.wait()
    task.cancel()
    await fd.eventually(lambda: not channel.connected)  # run() took the cancellation; turn runs on
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [m["content"] for m in fake.sent(DM)] == (["made it"] if replied else [])
