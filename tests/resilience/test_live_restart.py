"""A reply shown while it is written survives a SIGKILL as one answer: after the restart the
message the kill left half-written is finished in place (or, when it can no longer be edited,
replaced by one new message), on Telegram groups and on Discord."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_api import ALICE, DM, FakeDiscord
from tests.fakes.llm import FakeLLM, is_consolidation, streamed
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import Gateway, until

GROUP = -100123
ANSWER = (
    "Every word of this answer is written slowly, so that a kill lands while it is still growing. "
) * 8
ANSWER = ANSWER.strip()
SLOW = 25.0  # tokens a second: the answer takes about seven seconds to write
PARTS = [(f"{letter} " * 1500).strip() for letter in "abc"]  # one Telegram message each


def _chat(body: dict[str, Any]) -> bool:
    return not is_consolidation(body)


def _ask(fake: FakeTelegram, question: str, topic: int | None = None) -> None:
    fake.message(f"@memgate_bot {question}", chat_id=GROUP, user_id=42, thread_id=topic)


def _edits(fake: FakeTelegram, chat_id: int) -> list[dict[str, Any]]:
    return [c.params for c in fake.calls_to("editMessageText", ok_only=True)
            if c.params.get("chat_id") == chat_id]  # fmt: skip


async def _kill_while_shown(gateway: Gateway, fake: FakeTelegram, messages: int = 1) -> int:
    """Wait until the reply's `messages`-th message is out and has been edited once (so memgate
    knew it), SIGKILL, and return that message's id."""

    def shown() -> bool:
        made = sorted(fake.chats.get(GROUP, {}))
        return len(made) >= messages and any(
            e["message_id"] == made[messages - 1] for e in _edits(fake, GROUP)
        )

    await until(shown, 30, f"message {messages} of the live reply, edited")
    await gateway.kill()
    return sorted(fake.chats[GROUP])[messages - 1]


async def _restart_and_wait(gateway: Gateway, fake: FakeTelegram, last: str) -> None:
    """Restart, wait for `last` to be shown in the group, then stop cleanly."""
    await gateway.start()
    await until(lambda: last in fake.shown(GROUP), 45, "the whole answer in the group")
    assert await gateway.stop() == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("topic", [None, 7], ids=["group", "topic"])
async def test_a_kill_mid_stream_ends_with_the_same_message_holding_the_whole_answer(
    topic: int | None,
    make_gateway: GatewayFactory,
    fake_llm: FakeLLM,
    fake_telegram: FakeTelegram,
) -> None:
    """Killed after the first part of a group's (or a forum topic's) live reply was shown and
    before the answer was stored, the restarted turn streams into that same message: one
    message, the whole answer."""
    gateway = make_gateway()
    await gateway.start()
    fake_llm.push(streamed(ANSWER, SLOW), match=_chat)
    _ask(fake_telegram, "tell me slowly", topic)
    await _kill_while_shown(gateway, fake_telegram)
    assert fake_telegram.shown(GROUP)[0] != ANSWER  # cut mid-stream
    fake_llm.push(streamed(ANSWER, 4 * SLOW), match=_chat)
    await _restart_and_wait(gateway, fake_telegram, ANSWER)
    assert fake_telegram.shown(GROUP) == [ANSWER]
    assert len(fake_telegram.sent(GROUP)) == 1
    assert {p.get("message_thread_id") for p in fake_telegram.sent(GROUP)} == {topic}


@pytest.mark.timeout(120)
async def test_a_kill_after_the_answer_is_stored_finishes_the_shown_message(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed after the answer was stored and while its final edit was on its way, the restart
    edits the same message to the stored answer, without asking the model again."""
    gateway = make_gateway()
    await gateway.start()
    fake_llm.push(streamed(ANSWER, 4 * SLOW), match=_chat)

    def final(params: dict[str, Any]) -> bool:
        return params.get("parse_mode") == "HTML"

    with fake_telegram.calls_unanswered("editMessageText", final) as arrived:
        _ask(fake_telegram, "tell me")
        await until(arrived.is_set, 30, "the final edit")
        await gateway.kill()
    assert fake_telegram.shown(GROUP) and fake_telegram.shown(GROUP)[0] != ANSWER
    await _restart_and_wait(gateway, fake_telegram, ANSWER)
    assert fake_telegram.shown(GROUP) == [ANSWER]
    assert len(fake_telegram.sent(GROUP)) == 1
    assert len([b for b in fake_llm.chat_requests() if _chat(b)]) == 1


@pytest.mark.timeout(150)
async def test_a_long_answer_killed_after_its_second_message_ends_in_three_messages(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """An answer of three messages, killed once the second was shown: after the restart the two
    are finished in place and the third follows, three messages in all."""
    gateway = make_gateway()
    await gateway.start()
    whole = "\n\n".join(PARTS)
    fake_llm.push(streamed(whole, 250), match=_chat)
    _ask(fake_telegram, "tell me everything")
    await _kill_while_shown(gateway, fake_telegram, messages=2)
    fake_llm.push(streamed(whole, 1000), match=_chat)
    await _restart_and_wait(gateway, fake_telegram, PARTS[2])
    assert fake_telegram.shown(GROUP) == PARTS
    assert len(fake_telegram.sent(GROUP)) == 3


@pytest.mark.timeout(120)
async def test_a_shown_message_deleted_before_the_restart_is_replaced_by_one_new_message(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed mid-stream, then the half-written message is deleted by a person: after the
    restart the answer comes in one new message."""
    gateway = make_gateway()
    await gateway.start()
    fake_llm.push(streamed(ANSWER, SLOW), match=_chat)
    _ask(fake_telegram, "tell me slowly")
    shown = await _kill_while_shown(gateway, fake_telegram)
    fake_telegram.delete(GROUP, shown)
    fake_llm.push(streamed(ANSWER, 4 * SLOW), match=_chat)
    await _restart_and_wait(gateway, fake_telegram, ANSWER)
    assert fake_telegram.shown(GROUP) == [ANSWER]
    assert len(fake_telegram.sent(GROUP)) == 2  # the one deleted, and its replacement


@pytest.mark.timeout(120)
async def test_a_shown_message_that_cannot_be_edited_is_replaced_and_deleted(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Killed mid-stream, the half-written message then refuses edits (Telegram's "message
    can't be edited"): the answer goes out as one new message and the old part is deleted."""
    gateway = make_gateway()
    await gateway.start()
    fake_llm.push(streamed(ANSWER, SLOW), match=_chat)
    _ask(fake_telegram, "tell me slowly")
    shown = await _kill_while_shown(gateway, fake_telegram)
    fake_telegram.fail_next(
        "editMessageText",
        400,
        "Bad Request: message can't be edited",
        match=lambda params: params.get("message_id") == shown,
    )
    fake_llm.push(streamed(ANSWER, 4 * SLOW), match=_chat)
    await _restart_and_wait(gateway, fake_telegram, ANSWER)
    assert fake_telegram.shown(GROUP) == [ANSWER]
    deleted = [
        c.params["message_id"] for c in fake_telegram.calls_to("deleteMessage", ok_only=True)
    ]
    assert deleted == [shown]


# -- Discord ---------------------------------------------------------------------------------------
def _on_discord(fake: FakeDiscord, root: Path) -> dict[str, Any]:
    discord = {
        "enabled": True,
        "token": fake.token,
        "allow_from": [ALICE["id"]],
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
    }
    return {"channels": {"telegram": {"enabled": False}, "discord": discord}}


async def _start_on_discord(gateway: Gateway, fake: FakeDiscord) -> None:
    """Start and wait for Discord's session to be ready (memgate's health says so only later)."""
    readies = fake.readies
    await gateway.start(ready=False)
    await until(lambda: fake.readies > readies or not gateway.alive, 30, "a Discord session")
    assert gateway.alive, gateway.log()[-3000:]


@pytest.mark.timeout(120)
async def test_on_discord_a_kill_mid_stream_ends_with_the_same_message_holding_the_answer(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    """Killed after the first part of a Discord live reply was shown, the restart finishes that
    same message: one message, the whole answer."""
    gateway = make_gateway(_on_discord(fake_discord, tmp_path))
    await _start_on_discord(gateway, fake_discord)
    fake_llm.push(streamed(ANSWER, SLOW), match=_chat)
    await fake_discord.send_message(DM, ALICE, "tell me slowly")
    await until(lambda: bool(fake_discord.edits(DM)), 30, "the live reply, edited")
    await gateway.kill()
    assert fake_discord.shown(DM)[0] != ANSWER
    fake_llm.push(streamed(ANSWER, 4 * SLOW), match=_chat)
    await _start_on_discord(gateway, fake_discord)
    await until(lambda: ANSWER in fake_discord.shown(DM), 45, "the whole answer")
    assert await gateway.stop() == 0
    assert fake_discord.shown(DM) == [ANSWER]
    assert len(fake_discord.sent(DM)) == 1


@pytest.mark.timeout(120)
async def test_on_discord_a_shown_message_refusing_edits_is_replaced_and_deleted(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_discord: FakeDiscord, tmp_path: Path
) -> None:
    """Killed mid-stream, the half-written Discord message then refuses edits (403, no access):
    the answer goes out as one new message and the old part is deleted."""
    gateway = make_gateway(_on_discord(fake_discord, tmp_path))
    await _start_on_discord(gateway, fake_discord)
    fake_llm.push(streamed(ANSWER, SLOW), match=_chat)
    await fake_discord.send_message(DM, ALICE, "tell me slowly")
    await until(lambda: bool(fake_discord.edits(DM)), 30, "the live reply, edited")
    await gateway.kill()
    [shown] = fake_discord.posted[DM]
    fake_discord.fail("PATCH", f"/channels/{DM}/messages/{shown}", status=403)
    fake_llm.push(streamed(ANSWER, 4 * SLOW), match=_chat)
    await _start_on_discord(gateway, fake_discord)
    await until(lambda: ANSWER in fake_discord.shown(DM), 45, "the whole answer")
    assert await gateway.stop() == 0
    assert fake_discord.shown(DM) == [ANSWER]
    assert [r.status for r in fake_discord.calls("DELETE", f"/channels/{DM}/messages/{shown}")] == [
        204
    ]
