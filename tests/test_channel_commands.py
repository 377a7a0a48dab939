"""Commands the channels answer themselves (/pair, Telegram's /start), read by the one command
parser: any capitalisation, and Telegram's /cmd@bot form; the real SDKs against the fakes."""

from __future__ import annotations

import re
from pathlib import Path

from channels.pairing import PairingStore
from gateway.agent.commands.registry import greeting
from tests.fakes import discord_api as fd
from tests.fakes.discord_api import ALICE, FakeDiscord, Recorder, serving
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import Recorder as TelegramRecorder
from tests.fakes.telegram_harness import make_channel, running

GROUP = -100


def pending_code(store: PairingStore, channel: str, sender_id: str) -> str:
    """A stranger's pairing code, as the bot would have sent it to them."""
    code = store.request(channel, sender_id, "Mallory").code
    assert code and re.fullmatch(r"[A-HJ-NP-Z2-9]{8}", code)
    return code


async def test_telegram_pair_and_start_in_any_capitalisation(
    fake_telegram: FakeTelegram, tmp_path: Path
) -> None:
    """/Pair CODE approves, /Start and /START@memgate_bot (in a group) greet; the handler sees
    none of them, so none is answered "Unknown command"."""
    store = PairingStore(tmp_path / "state")
    code = pending_code(store, "telegram", "666")
    handler = TelegramRecorder()
    channel = make_channel(fake_telegram, tmp_path, handler, dm_policy="pairing", pairing=store)
    sent = fake_telegram.sent
    async with running(channel):
        fake_telegram.message(f"/Pair {code.lower()}")
        await fake_telegram.wait_for(lambda: len(sent(42)) == 1)
        fake_telegram.message("/Start")
        fake_telegram.message("/START@memgate_bot", chat_id=GROUP)
        await fake_telegram.wait_for(lambda: len(sent(42)) == 2 and len(sent(GROUP)) == 1)
    assert "Approved Mallory" in sent(42)[0]["text"]
    assert store.is_approved("telegram", "666")
    greeted = [sent(42)[1]["text"], sent(GROUP)[0]["text"]]
    assert greeted == [greeting(), greeting()]
    assert handler.seen == []


async def test_discord_pair_in_capitals_approves(fake_discord: FakeDiscord, tmp_path: Path) -> None:
    """Discord: the owner's /PAIR CODE approves the stranger, and never reaches the handler."""
    store = PairingStore(tmp_path / "state")
    code = pending_code(store, "discord", str(fd.MALLORY["id"]))
    handler = Recorder()
    async with serving(fake_discord, handler, tmp_path, dm_policy="pairing", pairing=store):
        await fake_discord.send_message(fd.DM, ALICE, f"/PAIR {code}")
        await fake_discord.wait_for(lambda: len(fake_discord.sent(fd.DM)) == 1)
    assert "Approved Mallory" in fake_discord.sent(fd.DM)[0]["content"]
    assert store.is_approved("discord", str(fd.MALLORY["id"]))
    assert handler.inbound == []
