"""The Slack adapter against a fake Slack (Web API and Socket Mode on loopback), with the real
slack-sdk: DMs, channel mentions, threads as sessions, retried events, rate limits, pairing."""

from __future__ import annotations

from pathlib import Path

from channels.pairing import PairingStore
from tests.fakes.slack_api import (
    ALICE,
    BOT_USER,
    DM,
    GENERAL,
    MALLORY,
    STRANGER_DM,
    Recorder,
    fake_slack,
    message_event,
    serving,
)


async def test_dm_answered(tmp_path: Path) -> None:
    """An owner's DM reaches the agent as a private message and its answer is posted in the DM."""
    recorder = Recorder()
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        await fake.say(DM, ALICE, "hello there")
        await fake.wait_for(lambda: fake.texts(DM))
    assert fake.texts(DM) == ["echo: hello there"]
    [inbound] = recorder.inbound
    assert (inbound.chat_id, inbound.sender_id, inbound.is_group) == (DM, ALICE, False)
    assert inbound.sender_is_owner and inbound.key == f"slack:{DM}"
    assert inbound.sender_name == "Alice"


async def test_channel_answers_on_mention_only(tmp_path: Path) -> None:
    """In a channel the bot answers a message that mentions it, without the mention in the
    text, and stays silent on the chatter around it."""
    recorder = Recorder()
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        await fake.say(GENERAL, ALICE, "just chatting")
        await fake.say(GENERAL, ALICE, f"<@{BOT_USER}> what time is it?")
        await fake.wait_for(lambda: fake.texts(GENERAL))
    assert fake.texts(GENERAL) == ["echo: what time is it?"]
    [inbound] = recorder.inbound
    assert inbound.is_group and inbound.mentioned and inbound.key == f"slack:{GENERAL}"


async def test_thread_keeps_its_session(tmp_path: Path) -> None:
    """Messages in a thread share the thread's own session, apart from the channel's, and the
    answers stay in the thread; once the bot answered there, a reply needs no mention."""
    recorder = Recorder()
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        root = await fake.say(GENERAL, ALICE, f"<@{BOT_USER}> start")
        await fake.wait_for(lambda: len(fake.texts(GENERAL)) == 1)
        await fake.say(GENERAL, ALICE, f"<@{BOT_USER}> one", thread_ts=root["ts"])
        await fake.wait_for(lambda: len(fake.texts(GENERAL)) == 2)
        await fake.say(GENERAL, ALICE, "two", thread_ts=root["ts"])
        await fake.wait_for(lambda: len(fake.texts(GENERAL)) == 3)
    keys = [inbound.key for inbound in recorder.inbound]
    thread = f"slack:{GENERAL}:thread:{root['ts']}"
    assert keys == [f"slack:{GENERAL}", thread, thread]
    posted = fake.sent(GENERAL)
    assert [m["thread_ts"] for m in posted] == [None, root["ts"], root["ts"]]
    assert [m["text"] for m in posted] == ["echo: start", "echo: one", "echo: two"]


async def test_unacknowledged_event_answered_once(tmp_path: Path) -> None:
    """An event whose acknowledgement was lost comes again (retry_attempt 1, a new envelope);
    the bot acknowledges it but answers the message once."""
    recorder = Recorder()
    async with (
        fake_slack(ack_timeout=0.3, ignore_acks=1) as fake,
        serving(fake, recorder, tmp_path),
    ):
        envelope = await fake.push(message_event(DM, ALICE, "only once"))
        await fake.wait_for(lambda: envelope.acked)
        await fake.say(DM, ALICE, "after")  # answered in order: the retry was looked at
        await fake.wait_for(lambda: len(fake.texts(DM)) == 2)
    assert envelope.attempts == 2
    assert fake.texts(DM) == ["echo: only once", "echo: after"]
    assert [inbound.text for inbound in recorder.inbound] == ["only once", "after"]


async def test_rate_limit_waits_for_retry_after(tmp_path: Path) -> None:
    """A 429 on chat.postMessage is waited out for its Retry-After, then the reply goes out."""
    recorder = Recorder()
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        fake.rate_limit("chat.postMessage", retry_after=1)
        await fake.say(DM, ALICE, "busy?")
        await fake.wait_for(lambda: fake.texts(DM))
    first, second = fake.of("chat.postMessage")
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 1.0
    assert fake.texts(DM) == ["echo: busy?"]


async def test_stranger_gets_a_pairing_code(tmp_path: Path) -> None:
    """A stranger's DM under dm_policy pairing is answered with a code, and nothing of it
    reaches the agent."""
    recorder = Recorder()
    pairing = PairingStore(tmp_path / "state")
    options = {"dm_policy": "pairing", "pairing": pairing}
    async with fake_slack() as fake, serving(fake, recorder, tmp_path, **options):
        await fake.say(STRANGER_DM, MALLORY, "let me in")
        await fake.wait_for(lambda: fake.texts(STRANGER_DM))
    assert recorder.inbound == []
    [reply] = fake.texts(STRANGER_DM)
    [waiting] = pairing.pending("slack")
    assert waiting.code in reply and waiting.sender_id == MALLORY


async def test_slash_command_reaches_the_agent_as_a_command(tmp_path: Path) -> None:
    """`/memgate new` (Slack keeps every message starting with `/` to its own commands) reaches
    the agent as `/new` from that person in that chat, in a DM or a channel."""
    recorder = Recorder()
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        envelope = await fake.slash(DM, ALICE, "new")
        await fake.slash(GENERAL, ALICE, "help")
        await fake.wait_for(lambda: fake.texts(DM) and fake.texts(GENERAL))
    assert envelope.acked
    assert sorted((i.chat_id, i.text, i.is_group) for i in recorder.inbound) == [
        (GENERAL, "/help", True),
        (DM, "/new", False),
    ]


async def test_a_dropped_socket_is_reconnected(tmp_path: Path) -> None:
    """When Slack closes the socket, the SDK opens a new one and messages are answered again."""
    recorder = Recorder()
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        await fake.drop()
        await fake.wait_for(lambda: fake.connections == 2)
        await fake.say(DM, ALICE, "still there?")
        await fake.wait_for(lambda: fake.texts(DM))
    assert fake.texts(DM) == ["echo: still there?"]
    assert len(fake.of("apps.connections.open")) == 2  # a fresh URL for the new connection
