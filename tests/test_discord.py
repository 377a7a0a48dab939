"""The Discord channel's message handling: the real discord.py against the fake Discord on loopback.

Access, group policy, threads, attachments and reply splitting; connection behaviour (resume, 429,
login) is in test_discord_connection.py.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from gateway.bus import InboundMessage, OutboundMessage
from tests.fakes import discord_api as fd
from tests.fakes.discord_api import (
    ALICE,
    BARRIER_DM,
    BOT_MENTION,
    BOT_ROLE,
    DM,
    GENERAL,
    GUILD,
    MALLORY,
    OTHER_BOT,
    STRANGER_DM,
    THREAD,
    FakeDiscord,
    Recorder,
    barrier,
    serving,
)


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    """The shared fake Discord (tests/conftest.py) under this module's short name."""
    return fake_discord


async def test_dm_from_allowed_user_is_answered(
    fake: FakeDiscord, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An allowed user's DM reaches the handler keyed by the DM channel and is answered there."""
    caplog.set_level(logging.DEBUG)
    handler = Recorder()
    async with serving(fake, handler, tmp_path):
        sent = await fake.send_message(DM, ALICE, "hello there")
        await fake.wait_for(lambda: fake.sent(DM))
    [inbound] = handler.inbound
    assert inbound.key == f"discord:{DM}"
    assert (inbound.sender_id, inbound.sender_name, inbound.text) == (
        ALICE["id"],
        "Alice",
        "hello there",
    )
    assert (inbound.is_group, inbound.message_id) == (False, sent["id"])
    [reply] = fake.sent(DM)
    assert reply["content"] == "echo: hello there"
    assert "everyone" not in reply["allowed_mentions"]["parse"]
    assert fake.identifies[0]["intents"] & fd.MESSAGE_CONTENT_INTENT
    assert fake.token not in caplog.text


async def test_typing_indicator_runs_while_the_handler_works(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    """The typing indicator is sent to the chat while the handler is still working."""

    async def slow_handler(message: InboundMessage, stream: object = None) -> OutboundMessage:
        await fake.wait_for(lambda: fake.calls("POST", f"/channels/{DM}/typing"))
        return OutboundMessage("discord", message.chat_id, "done thinking")

    async with serving(fake, slow_handler, tmp_path):
        await fake.send_message(DM, ALICE, "think hard")
        await fake.wait_for(lambda: fake.sent(DM))
    [typing] = fake.calls("POST", f"/channels/{DM}/typing")
    assert typing.at <= fake.calls("POST", f"/channels/{DM}/messages")[0].at


async def test_stranger_gets_no_handler_call_typing_or_download(
    fake: FakeDiscord, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sender outside allow_from costs nothing: no handler, no typing, no download; logged once."""
    url = fake.add_file("evil.png", b"png")
    handler = Recorder()
    async with serving(fake, handler, tmp_path):
        for text in ("hi", "hello?"):
            await fake.send_message(
                STRANGER_DM,
                MALLORY,
                text,
                attachments=[fd.attachment(url, "evil.png", 3, "image/png")],
            )
        await barrier(fake)
    assert [m.chat_id for m in handler.inbound] == [str(BARRIER_DM)]
    assert not [r for r in fake.requests if str(STRANGER_DM) in r.path]
    assert not fake.calls("GET", "/attachments/evil.png")
    assert not (tmp_path / "media").exists()
    refused = [r for r in caplog.records if "refused sender" in r.getMessage()]
    assert len(refused) == 1 and MALLORY["id"] in refused[0].getMessage()


async def test_allow_everyone_with_star(fake: FakeDiscord, tmp_path: Path) -> None:
    """allow_from ["*"] lets any user in."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path, allow_from=["*"]):
        await fake.send_message(STRANGER_DM, MALLORY, "hi")
        await fake.wait_for(lambda: fake.sent(STRANGER_DM))
    assert handler.inbound[0].sender_id == MALLORY["id"]


async def test_bots_and_own_messages_are_ignored(fake: FakeDiscord, tmp_path: Path) -> None:
    """Messages from other bots and from the bot itself never reach the handler."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path, allow_from=["*"]):
        await fake.send_message(DM, OTHER_BOT, "beep")
        await fake.send_message(DM, fd.BOT_USER, "my own words")
        await barrier(fake)
    assert [m.chat_id for m in handler.inbound] == [str(BARRIER_DM)]


async def test_guild_message_needs_a_mention(fake: FakeDiscord, tmp_path: Path) -> None:
    """Under group_policy mention, a plain guild message is ignored and a mentioned one answered."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path):
        await fake.send_message(GENERAL, ALICE, "just chatting", guild_id=GUILD)
        await barrier(fake)
        assert not fake.sent(GENERAL)
        await fake.send_message(
            GENERAL,
            ALICE,
            f"{BOT_MENTION} what time is it?",
            guild_id=GUILD,
            mentions=[fd.BOT_USER],
        )
        await fake.wait_for(lambda: fake.sent(GENERAL))
    inbound = handler.inbound[-1]
    assert inbound.key == f"discord:{GENERAL}"
    assert (inbound.text, inbound.is_group, inbound.mentioned) == ("what time is it?", True, True)
    assert [m["content"] for m in fake.sent(GENERAL)] == ["echo: what time is it?"]


async def test_a_bare_mention_is_ignored(fake: FakeDiscord, tmp_path: Path) -> None:
    """A message that is only the bot's mention, with nothing else, does not start a turn."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path):
        await fake.send_message(GENERAL, ALICE, BOT_MENTION, guild_id=GUILD, mentions=[fd.BOT_USER])
        await barrier(fake)
    assert [m.chat_id for m in handler.inbound] == [str(BARRIER_DM)]


async def test_reply_to_the_bot_and_its_role_count_as_mentions(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    """Replying to one of the bot's messages, or mentioning its managed role, addresses it."""
    handler = Recorder()
    bots_message = fd.message(GENERAL, fd.BOT_USER, "an earlier answer", guild_id=GUILD)
    async with serving(fake, handler, tmp_path):
        await fake.send_message(
            GENERAL, ALICE, "and then?", guild_id=GUILD, referenced=bots_message
        )
        await fake.send_message(
            GENERAL, ALICE, f"<@&{BOT_ROLE}> you there?", guild_id=GUILD, mention_roles=[BOT_ROLE]
        )
        await fake.wait_for(lambda: len(fake.sent(GENERAL)) == 2)
    assert sorted(m.text for m in handler.inbound) == ["and then?", "you there?"]
    assert all(m.mentioned for m in handler.inbound)


async def test_other_users_mentions_become_names(fake: FakeDiscord, tmp_path: Path) -> None:
    """Other users' mentions reach the handler as @name rather than raw ids."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path):
        await fake.send_message(
            GENERAL,
            ALICE,
            f"{BOT_MENTION} say hi to <@{MALLORY['id']}>",
            guild_id=GUILD,
            mentions=[fd.BOT_USER, MALLORY],
        )
        await fake.wait_for(lambda: fake.sent(GENERAL))
    assert handler.inbound[0].text == "say hi to @Mallory"


@pytest.mark.parametrize(("policy", "answered"), [("open", True), ("off", False)])
async def test_group_policy_open_and_off(
    fake: FakeDiscord, tmp_path: Path, policy: str, answered: bool
) -> None:
    """open answers every guild message from an allowed user; off ignores guilds entirely."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path, group_policy=policy):
        await fake.send_message(GENERAL, ALICE, "no mention here", guild_id=GUILD)
        await fake.send_message(
            GENERAL, ALICE, f"{BOT_MENTION} hey", guild_id=GUILD, mentions=[fd.BOT_USER]
        )
        await barrier(fake)
        if answered:
            await fake.wait_for(lambda: len(fake.sent(GENERAL)) == 2)
    assert len(fake.sent(GENERAL)) == (2 if answered else 0)


async def test_thread_message_has_the_threads_session(fake: FakeDiscord, tmp_path: Path) -> None:
    """A message in a thread is its own session, keyed and answered by the thread's id."""
    handler = Recorder()
    async with serving(fake, handler, tmp_path):
        await fake.dispatch(
            "THREAD_CREATE", {**fd.thread(THREAD, GUILD, GENERAL), "newly_created": True}
        )
        await fake.send_message(
            THREAD, ALICE, f"{BOT_MENTION} in the thread", guild_id=GUILD, mentions=[fd.BOT_USER]
        )
        await fake.wait_for(lambda: fake.sent(THREAD))
    [inbound] = handler.inbound
    assert inbound.key == f"discord:{THREAD}"
    assert inbound.is_group
    assert not fake.sent(GENERAL)


def _long_reply() -> str:
    prose = " ".join(f"word{i}" for i in range(200))  # ~1,400 characters
    code = "\n".join(f"    value_{i} = compute({i}) + offset  # step {i}" for i in range(60))
    text = f"{prose}\n\n```python\n{code}\n```\n\n{prose}\n\nThe end."
    assert len(text) >= 5000
    return text


def _words(text: str) -> list[str]:
    return [w for line in text.splitlines() if not line.startswith("```") for w in line.split()]


async def test_long_reply_is_split_with_balanced_fences(fake: FakeDiscord, tmp_path: Path) -> None:
    """A 5,000-character reply with a code block arrives in pieces ≤2000, fences balanced, whole."""
    text = _long_reply()
    async with serving(fake, Recorder(lambda _: text), tmp_path):
        await fake.send_message(DM, ALICE, "long please")
        await fake.wait_for(lambda: len(fake.sent(DM)) >= 3)
        await barrier(fake)
    pieces = [m["content"] for m in fake.sent(DM)]
    assert all(len(p) <= 2000 for p in pieces)
    assert all(len(re.findall(r"^```", p, flags=re.M)) % 2 == 0 for p in pieces)
    assert _words("\n".join(pieces)) == _words(text)


async def test_attachment_is_saved_and_mentioned(fake: FakeDiscord, tmp_path: Path) -> None:
    """An allowed user's attachments land under media/discord/<chat>/ and are named in the text."""
    photo = fake.add_file("cat.png", b"\x89PNG fake")
    notes = fake.add_file("notes.txt", b"remember the milk")
    handler = Recorder()
    async with serving(fake, handler, tmp_path):
        await fake.send_message(
            DM,
            ALICE,
            "look",
            attachments=[
                fd.attachment(photo, "../../cat.png", 9, "image/png"),
                fd.attachment(notes, "notes.txt", 17, "text/plain"),
            ],
        )
        await fake.wait_for(lambda: fake.sent(DM))
    [inbound] = handler.inbound
    image, document = inbound.media
    assert image.startswith(f"media/discord/{DM}/") and image.endswith("cat.png")
    assert ".." not in image and document.startswith(f"media/discord/{DM}/")
    assert (tmp_path / image).read_bytes() == b"\x89PNG fake"
    assert (tmp_path / document).read_text() == "remember the milk"
    assert inbound.text == f"look\n[image: {image}]\n[file: {document}]"


async def test_attachment_over_the_cap_is_not_downloaded(fake: FakeDiscord, tmp_path: Path) -> None:
    """An attachment larger than max_media_bytes is named in the text but never fetched."""
    url = fake.add_file("big.bin", b"x" * 100)
    handler = Recorder()
    async with serving(fake, handler, tmp_path, max_media_bytes=10):
        await fake.send_message(
            DM, ALICE, "", attachments=[fd.attachment(url, "big.bin", 100, None)]
        )
        await fake.wait_for(lambda: fake.sent(DM))
    assert handler.inbound[0].text == "[file: big.bin (not downloaded)]"
    assert handler.inbound[0].media == ()
    assert not fake.calls("GET", "/attachments/big.bin")


async def test_handler_error_does_not_stop_the_channel(
    fake: FakeDiscord, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that raises is logged once, with its traceback; the next message is answered."""

    def reply(text: str) -> str:
        if text == "boom":
            raise RuntimeError("handler bug")
        return "fine"

    async with serving(fake, Recorder(reply), tmp_path):
        await fake.send_message(DM, ALICE, "boom")
        await fake.send_message(DM, ALICE, "again")
        await fake.wait_for(lambda: fake.sent(DM))
        await barrier(fake)
    assert [m["content"] for m in fake.sent(DM)] == ["fine"]
    # Its traceback (a task group may wrap the error) in one record, none before or after it.
    logged = [r for r in caplog.records if "RuntimeError: handler bug" in (r.exc_text or "")]
    assert [r.levelno for r in logged] == [logging.ERROR]


async def test_reply_to_is_sent_as_a_message_reference(fake: FakeDiscord, tmp_path: Path) -> None:
    """An OutboundMessage with reply_to answers as a Discord reply to that message."""

    async def handler(message: InboundMessage, stream: object = None) -> OutboundMessage:
        return OutboundMessage("discord", message.chat_id, "replying", reply_to=message.message_id)

    async with serving(fake, handler, tmp_path):
        sent = await fake.send_message(DM, ALICE, "quote me")
        await fake.wait_for(lambda: fake.sent(DM))
    [reply] = fake.sent(DM)
    assert reply["message_reference"]["message_id"] == int(sent["id"])
