"""Bad input through the real `memgate run` and Telegram: blank, huge, broken and odd messages.

Each input: no crash (the next ordinary message is answered), nothing the model cannot use reaches
it, what is stored loads back as it was sent, and the user gets an answer where one is due.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from gateway.agent.commands.registry import HELP_TEXT
from gateway.service.app import Runtime
from tests.conftest import inbound
from tests.fakes.llm import FakeLLM, text
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import Gateway, read_session, session_paths, until

pytestmark = pytest.mark.timeout(120)

CHAT = 42


async def started(make_gateway: GatewayFactory) -> Gateway:
    gateway = make_gateway()
    await gateway.start()
    return gateway


def answers(telegram: FakeTelegram) -> list[str]:
    return [str(p.get("plain")) for p in telegram.sent(CHAT)]


def has_answers(telegram: FakeTelegram, count: int) -> bool:
    return len(answers(telegram)) >= count


async def answered(telegram: FakeTelegram, message: str, within: float = 30) -> None:
    """The ordinary message `message` got its echo: the bot is still serving."""
    telegram.message(message, chat_id=CHAT, user_id=CHAT)
    await until(lambda: f"echo: {message}" in answers(telegram), within, f"echo: {message}")


def user_lines(gateway: Gateway) -> list[str]:
    return [t for p in session_paths(gateway.workspace) for t in read_session(p).texts("user")]


def clean_log(gateway: Gateway) -> None:
    log = gateway.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


async def test_blank_messages_get_no_model_call_and_no_reply(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Empty, whitespace-only and bare-mention messages are dropped quietly, costing nothing."""
    gateway = await started(make_gateway)
    blanks = ["", " ", "\n\t\n", "\u3000\u00a0", "   \r\n   "]
    for blank in blanks:
        fake_telegram.message(blank, chat_id=CHAT, user_id=CHAT)
    fake_telegram.message("@memgate_bot", chat_id=-100, user_id=CHAT)  # a mention, nothing else
    fake_telegram.message("@memgate_bot   ", chat_id=-100, user_id=CHAT)
    await answered(fake_telegram, "a real message")
    assert len(fake_llm.chat_requests()) == 1
    assert answers(fake_telegram) == ["echo: a real message"]
    assert user_lines(gateway) == ["a real message"]
    clean_log(gateway)


async def test_a_one_megabyte_message_is_kept_and_answered_clearly(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A 1 MB message is kept whole, the user is told it is too long, later prompts leave it out."""
    gateway = await started(make_gateway)
    huge = "".join(f"word{i % 997} " for i in range(150_000))
    assert len(huge.encode()) > 1_000_000
    fake_telegram.message(huge, chat_id=CHAT, user_id=CHAT)
    await until(lambda: len(answers(fake_telegram)) == 1, 60, "the answer to 1 MB")
    [answer] = answers(fake_telegram)
    assert "too long for the model" in answer and "It is kept" in answer
    assert fake_llm.chat_requests() == []
    await answered(fake_telegram, "and now a short one")
    [request] = fake_llm.chat_requests()
    assert len(json.dumps(request["messages"])) < 100_000
    assert user_lines(gateway) == [huge.strip(), "and now a short one"]
    clean_log(gateway)


async def test_control_characters_round_trip(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """NUL, escape sequences, bidi overrides and other controls are stored and echoed intact."""
    gateway = await started(make_gateway)
    nasty = "a\x00b\x01\x07 \x1b[31mred\x1b[0m \x7f \u202eevil\u202c \ufeff\u200b x\ry\x0b\x0cz"
    fake_telegram.message(nasty, chat_id=CHAT, user_id=CHAT)
    await until(lambda: len(answers(fake_telegram)) == 1, 30, "the echo")
    assert nasty in fake_llm.chat_requests()[0]["messages"][-1]["content"]
    assert answers(fake_telegram)[0] == f"echo: {nasty}"
    assert user_lines(gateway) == [nasty]
    for path in session_paths(gateway.workspace):
        path.read_bytes().decode("utf-8")  # valid UTF-8, one record per line
    await answered(fake_telegram, "still here")
    clean_log(gateway)


def _file(kind: str, **fields: Any) -> dict[str, Any]:
    return {"file_id": f"{kind}-id", "file_unique_id": f"{kind}-u", **fields}


UNSUPPORTED = {
    "sticker": _file(
        "sticker", type="regular", width=512, height=512, is_animated=False, is_video=False
    ),
    "location": {"latitude": 52.52, "longitude": 13.40},
    "contact": {"phone_number": "+10000000000", "first_name": "Bob"},
    "dice": {"emoji": "🎲", "value": 6},
    "poll": {
        "id": "poll-1",
        "question": "Lunch?",
        "options": [
            {"text": "yes", "voter_count": 0, "persistent_id": "o1"},
            {"text": "no", "voter_count": 0, "persistent_id": "o2"},
        ],
        "total_voter_count": 0,
        "is_closed": False,
        "is_anonymous": True,
        "type": "regular",
        "allows_multiple_answers": False,
        "allows_revoting": False,
        "members_only": False,
    },
    "video_note": _file("video_note", length=240, duration=3),
    "venue": {
        "location": {"latitude": 1.0, "longitude": 2.0},
        "title": "Cafe",
        "address": "Main St 1",
    },
}


async def test_unsupported_message_types_are_ignored_safely(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Stickers, locations, polls and the like cost no model call, no download and no error."""
    gateway = await started(make_gateway)
    for kind, payload in UNSUPPORTED.items():
        extra: dict[str, Any] = {kind: payload}
        fake_telegram.message(None, chat_id=CHAT, user_id=CHAT, **extra)
    edited = {"message_id": 99, "date": 0, "chat": {"id": CHAT, "type": "private"}, "text": "e"}
    fake_telegram.push({"edited_message": {**edited, "edit_date": 1}})
    await answered(fake_telegram, "a plain message")
    assert len(fake_llm.chat_requests()) == 1
    assert fake_telegram.calls_to("getFile") == []
    assert user_lines(gateway) == ["a plain message"]
    clean_log(gateway)


async def test_an_update_the_sdk_cannot_parse_does_not_wedge_the_bot(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram
) -> None:
    """An update python-telegram-bot rejects is skipped; later messages are still answered."""
    await started(make_gateway)
    old_poll = {
        k: v for k, v in UNSUPPORTED["poll"].items() if k not in ("allows_revoting", "members_only")
    }
    old_poll["options"] = [{"text": "yes", "voter_count": 0}]
    fake_telegram.message(None, chat_id=CHAT, user_id=CHAT, poll=old_poll)
    await answered(fake_telegram, "are you still there?", within=6)


async def test_commands_with_arguments(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Commands work with arguments, a bot suffix or capitals; unknown ones say so."""
    gateway = await started(make_gateway)
    expected = [
        ("/help me please", HELP_TEXT.splitlines()[0]),
        ("/status right now", "Session: telegram:42"),
        ("/stop everything", "Nothing to stop."),
        ("/new and forget it", "New session started."),
        ("/NEW", "New session started."),
        ("/new@memgate_bot please", "New session started."),
        ("/frobnicate --all 3", "Unknown command /frobnicate."),
        ("/start deep-link-payload", "Hi! I'm your memgate assistant"),
        ("/ not a command", "echo: / not a command"),
        ("/42 neither", "echo: /42 neither"),
    ]
    for number, (command, _) in enumerate(expected, start=1):
        fake_telegram.message(command, chat_id=CHAT, user_id=CHAT)
        await until(partial(has_answers, fake_telegram, number), 30, command)
    for (command, start), answer in zip(expected, answers(fake_telegram), strict=True):
        assert answer.startswith(start), (command, answer)
    assert len(fake_llm.chat_requests()) == 2
    await answered(fake_telegram, "after the commands")
    clean_log(gateway)


async def test_a_command_followed_by_a_newline_or_tab_is_a_command(runtime: Runtime) -> None:
    """`/help` then a newline or a tab and more words is still /help."""
    for message in ("/help\nwhat can you do", "/status\tnow"):
        reply = await runtime.agent.handle(inbound(message))
        assert reply is not None and reply.text.split(maxsplit=1)[0] in ("Commands:", "Session:")


async def test_a_lone_surrogate_in_a_message_is_answered(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram
) -> None:
    """A message carrying a lone surrogate is stored and answered, not dropped."""
    gateway = await started(make_gateway)
    fake_telegram.message("broken \ud800 text", chat_id=CHAT, user_id=CHAT)
    await answered(fake_telegram, "next message")
    assert len(user_lines(gateway)) == 2


async def test_a_lone_surrogate_in_a_reply_reaches_the_user(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A model answer with a lone surrogate is still delivered (the character replaced)."""
    await started(make_gateway)
    fake_llm.push(text("half an emoji: \ud83d and the rest"))
    fake_telegram.message("say something odd", chat_id=CHAT, user_id=CHAT)
    await until(lambda: len(answers(fake_telegram)) == 1, 8, "the odd answer")
    assert "and the rest" in answers(fake_telegram)[0]


async def test_a_lone_surrogate_does_not_poison_the_session(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """After a lone surrogate, the session still answers and its file stays UTF-8."""
    await runtime.agent.handle(inbound("bad byte \udcff here"))
    reply = await runtime.agent.handle(inbound("and a normal message"))
    assert reply is not None and reply.text == "echo: and a normal message"
    runtime.sessions.path_for("test:42").read_bytes().decode("utf-8")
