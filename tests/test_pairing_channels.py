"""Pairing through the real channels: python-telegram-bot and discord.py against the fakes."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from channels.pairing import PairingStore
from gateway.bus import InboundMessage
from gateway.service.app import Runtime
from tests.fakes import discord_api as fd
from tests.fakes.discord_api import (
    ALICE,
    BARRIER_DM,
    BOT_MENTION,
    GENERAL,
    GUILD,
    MALLORY,
    STRANGER_DM,
    FakeDiscord,
    Recorder,
    barrier,
    serving,
)
from tests.fakes.llm import FakeLLM, last_user_text
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running

CODE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")


def codes_in(text: str) -> set[str]:
    return set(CODE.findall(text))


async def test_telegram_stranger_gets_one_code_and_nothing_is_kept(
    fake_telegram: FakeTelegram, tmp_path: Path, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """Three DMs from a stranger: one reply with a code, no LLM request, no session file."""
    store = PairingStore(runtime.config.state_dir)
    workspace = runtime.config.workspace
    channel = agent_channel(fake_telegram, runtime, dm_policy="pairing", pairing=store)
    async with running(channel):
        for text in ("hello", "anyone there?", "please answer"):
            fake_telegram.message(text, user_id=666, chat_id=666, username="mallory")
        # The owner's message comes after the three: once it is answered, they were all judged.
        fake_telegram.message("owner here", user_id=42, chat_id=42)
        await fake_telegram.wait_for(
            lambda: len(fake_telegram.sent(42)) == 1 and len(fake_telegram.sent(666)) >= 1
        )
    replies = fake_telegram.sent(666)
    [pending] = store.pending()
    assert len(replies) == 1 and codes_in(replies[0]["text"]) == {pending.code}
    assert (pending.channel, pending.sender_id) == ("telegram", "666")
    assert [last_user_text(r) for r in fake_llm.chat_requests()] == ["owner here"]
    assert not (workspace / "sessions" / "telegram:666.jsonl").exists()
    assert (workspace / "sessions" / "telegram:42.jsonl").exists()


async def test_telegram_pair_from_the_owner_lets_the_stranger_in(
    fake_telegram: FakeTelegram, tmp_path: Path, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """/pair CODE in the owner's DM approves; the guest's own /pair approves nothing."""
    store = PairingStore(runtime.config.state_dir)
    workspace = runtime.config.workspace
    channel = agent_channel(fake_telegram, runtime, dm_policy="pairing", pairing=store)
    sent = fake_telegram.sent
    async with running(channel):
        fake_telegram.message("hi", user_id=666, chat_id=666, username="mallory")
        await fake_telegram.wait_for(lambda: len(sent(666)) == 1)
        [code] = codes_in(sent(666)[0]["text"])
        fake_telegram.message(f"/pair {code}", user_id=42, chat_id=42)
        await fake_telegram.wait_for(lambda: len(sent(42)) == 1)
        assert "Approved" in sent(42)[0]["text"]
        fake_telegram.message("now?", user_id=666, chat_id=666, username="mallory")
        await fake_telegram.wait_for(lambda: len(sent(666)) == 2)
        assert sent(666)[1]["text"] == "echo: now?"
        # A second stranger; the first, now a guest but no owner, tries to approve them.
        fake_telegram.message("me too", user_id=777, chat_id=777, username="eve")
        await fake_telegram.wait_for(lambda: len(sent(777)) == 1)
        [other] = codes_in(sent(777)[0]["text"])
        fake_telegram.message(f"/pair {other}", user_id=666, chat_id=666, username="mallory")
        await fake_telegram.wait_for(lambda: len(sent(666)) == 3)
    assert "Only an owner" in sent(666)[2]["text"]
    assert not store.is_approved("telegram", "777")
    assert [a.approved_by for a in store.approved()] == ["telegram:42"]
    assert [last_user_text(r) for r in fake_llm.chat_requests()] == ["now?"]
    assert (workspace / "sessions" / "telegram:666.jsonl").exists()


async def test_telegram_approved_sender_is_still_ignored_in_a_group(
    fake_telegram: FakeTelegram, tmp_path: Path, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """Approving a DM grants no group: the guest addressing the bot in a group gets nothing."""
    store = PairingStore(runtime.config.state_dir)
    code = store.request("telegram", "666", "Mallory").code
    assert code
    store.approve(code, "cli")
    channel = agent_channel(fake_telegram, runtime, dm_policy="pairing", pairing=store)
    async with running(channel):
        fake_telegram.message("hey bot", user_id=666, chat_id=-100, reply_to_bot=True)
        fake_telegram.message("in my DM", user_id=666, chat_id=666, username="mallory")
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent(666)) == 1)
    assert fake_telegram.sent(-100) == []
    assert [last_user_text(r) for r in fake_llm.chat_requests()] == ["in my DM"]


async def test_telegram_disabled_dms_answer_nobody(
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    runtime: Runtime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """dm_policy disabled: neither a stranger nor the owner is answered in a DM; the owner's
    DM is logged once, without its text."""
    caplog.set_level(logging.DEBUG)  # the text is in no line of ours, at any level
    channel = agent_channel(
        fake_telegram,
        runtime,
        dm_policy="disabled",
        pairing=PairingStore(runtime.config.state_dir),
        allow_from=["42"],
    )
    async with running(channel):
        fake_telegram.message("stranger", user_id=666, chat_id=666)
        fake_telegram.message("owner's private words", user_id=42, chat_id=42)
        fake_telegram.message("in the group", user_id=42, chat_id=-100, reply_to_bot=True)
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent(-100)) == 1)
    assert fake_telegram.sent(666) == [] and fake_telegram.sent(42) == []
    # The libraries' own DEBUG lines are silenced by the service's log setup (gateway/logs.py).
    ours = [r.getMessage() for r in caplog.records if r.name.startswith(("channels", "gateway"))]
    dropped = [line for line in ours if "dm dropped" in line]
    assert len(dropped) == 1 and "sender_id=42 reason=dm_policy_disabled" in dropped[0]
    assert not [line for line in ours if "private words" in line]


def discord_replies(fake: FakeDiscord, channel_id: int) -> list[str]:
    return [str(body["content"]) for body in fake.sent(channel_id)]


async def test_discord_stranger_gets_one_code_and_a_fourth_none(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    """Discord: one reply per stranger however often they write; a fourth pending stranger: none."""
    store = PairingStore(tmp_path / "state")
    handler = Recorder()
    strangers = [fd.user(1_300_000_000_000_000_100 + n, f"s{n}") for n in range(3)]
    async with serving(fake_discord, handler, tmp_path, dm_policy="pairing", pairing=store):
        for text in ("hi", "hello?", "anyone"):
            await fake_discord.send_message(STRANGER_DM, MALLORY, text)
        for n, person in enumerate(strangers):
            await fake_discord.send_message(1_310_000_000_000_000_100 + n, person, "hi")
        await barrier(fake_discord)
        await fake_discord.wait_for(lambda: len(fake_discord.sent()) == 4)
    [reply] = discord_replies(fake_discord, STRANGER_DM)
    codes = {p.sender_id: p.code for p in store.pending("discord")}
    assert codes_in(reply) == {codes[MALLORY["id"]]}
    assert len(codes) == 3 and strangers[2]["id"] not in codes
    assert discord_replies(fake_discord, 1_310_000_000_000_000_102) == []
    assert [m.chat_id for m in handler.inbound] == [str(BARRIER_DM)]


async def test_discord_pair_from_the_owner_and_no_group_for_guests(
    fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    """Discord: Alice's /pair CODE lets Mallory's DMs in; Mallory's mention in a guild is ignored."""
    store = PairingStore(tmp_path / "state")
    handler = Recorder()
    async with serving(fake_discord, handler, tmp_path, dm_policy="pairing", pairing=store):
        await fake_discord.send_message(STRANGER_DM, MALLORY, "hi")
        await fake_discord.wait_for(lambda: len(fake_discord.sent(STRANGER_DM)) == 1)
        [code] = codes_in(discord_replies(fake_discord, STRANGER_DM)[0])
        await fake_discord.send_message(STRANGER_DM, MALLORY, f"/pair {code}")
        await fake_discord.send_message(fd.DM, ALICE, f"/pair {code}")
        await fake_discord.wait_for(lambda: len(fake_discord.sent(fd.DM)) == 1)
        assert "Approved Mallory" in discord_replies(fake_discord, fd.DM)[0]
        mention = [fd.user(fd.BOT_ID, "memgate", bot=True)]
        await fake_discord.send_message(
            GENERAL, MALLORY, f"{BOT_MENTION} hi all", guild_id=GUILD, mentions=mention
        )
        await fake_discord.send_message(STRANGER_DM, MALLORY, "let in?")
        await fake_discord.wait_for(lambda: len(fake_discord.sent(STRANGER_DM)) == 2)
    assert discord_replies(fake_discord, STRANGER_DM)[1] == "echo: let in?"
    assert fake_discord.sent(GENERAL) == []
    seen: list[InboundMessage] = handler.inbound
    assert [(m.chat_id, m.text, m.sender_is_owner) for m in seen] == [
        (str(STRANGER_DM), "let in?", False)
    ]
