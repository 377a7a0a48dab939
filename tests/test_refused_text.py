"""What a message admission refuses leaves on disk: nothing of its text, on either real channel.

python-telegram-bot against the fake Bot API, discord.py against the fake Discord, the real agent
behind them; afterwards every file under the state folder and the workspace is searched.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from channels.pairing import PairingStore
from gateway.service.app import Runtime
from tests.fakes import discord_api as fd
from tests.fakes.discord_api import ALICE, GENERAL, MALLORY, STRANGER_DM, FakeDiscord, serving
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running

GROUP = -100


def unique(label: str) -> str:
    """A text no file could hold by chance (ASCII, so JSON keeps it as it is)."""
    return f"{label}-{secrets.token_hex(8)}"


def files_holding(needles: list[str], *folders: Path) -> dict[str, list[str]]:
    """Each needle found, with the files under `folders` that hold it."""
    found: dict[str, list[str]] = {}
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            data = path.read_bytes()
            for needle in needles:
                if needle.encode() in data:
                    found.setdefault(needle, []).append(str(path))
    return found


async def test_telegram_refused_messages_leave_no_text_on_disk(
    fake_telegram: FakeTelegram, tmp_path: Path, runtime: Runtime
) -> None:
    """A stranger's DM, their mention in a group and the owner's unaddressed group chatter are
    in no file of the state folder or the workspace; the owner's admitted DM is answered."""
    state, workspace = runtime.config.state_dir, runtime.config.workspace
    channel = agent_channel(
        fake_telegram, runtime, dm_policy="pairing", pairing=PairingStore(state)
    )
    refused = [unique("stranger-dm"), unique("stranger-group"), unique("unaddressed")]
    async with running(channel):
        fake_telegram.message(refused[0], user_id=666, chat_id=666, username="mallory")
        fake_telegram.message(f"@memgate_bot {refused[1]}", user_id=666, chat_id=GROUP)
        fake_telegram.message(refused[2], user_id=42, chat_id=GROUP)
        fake_telegram.message("owner here", user_id=42, chat_id=42)
        sent = fake_telegram.sent
        await fake_telegram.wait_for(lambda: len(sent(42)) == 1 and len(sent(666)) == 1)
    assert sent(42)[0]["text"] == "echo: owner here"
    assert sent(GROUP) == []
    assert list(state.glob("telegram-*-inbox.jsonl"))  # the journal exists, and was searched
    assert files_holding([*refused, "owner here"], state, workspace).keys() == {"owner here"}


async def test_discord_refused_messages_leave_no_text_on_disk(
    fake_discord: FakeDiscord, tmp_path: Path, runtime: Runtime
) -> None:
    """Discord: a stranger's DM and the owner's unaddressed server message are in no file of the
    state folder or the workspace; the owner's admitted DM is answered."""
    state, workspace = runtime.config.state_dir, runtime.config.workspace
    refused = [unique("stranger-dm"), unique("unaddressed")]
    async with serving(
        fake_discord,
        runtime.agent.handle,
        workspace,
        state_dir=state,
        dm_policy="pairing",
        pairing=PairingStore(state),
    ):
        await fake_discord.send_message(STRANGER_DM, MALLORY, refused[0])
        await fake_discord.send_message(GENERAL, ALICE, refused[1], guild_id=fd.GUILD)
        await fake_discord.send_message(fd.DM, ALICE, "owner here")
        sent = fake_discord.sent
        await fake_discord.wait_for(lambda: len(sent(fd.DM)) == 1 and len(sent(STRANGER_DM)) == 1)
    assert sent(fd.DM)[0]["content"] == "echo: owner here"
    assert sent(GENERAL) == []
    assert list(state.glob("discord-*-inbox.jsonl"))
    assert files_holding([*refused, "owner here"], state, workspace).keys() == {"owner here"}
