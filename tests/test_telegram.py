"""The Telegram channel: the real python-telegram-bot against the fake Bot API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

import channels.telegram.channel
import channels.telegram.delivery
from channels.base import ChannelConfigError
from channels.pairing import PairingStore
from channels.telegram.channel import TelegramChannel
from channels.telegram.connect import TelegramConfigError
from channels.utf16 import utf16_length
from gateway.bus import InboundMessage, OutboundMessage
from gateway.config.file import load_config
from gateway.config.models import TelegramConfig
from gateway.errors import ConfigError
from gateway.logs import RedactingFilter
from gateway.service.app import Runtime
from tests.conftest import telegram_inbox_pending
from tests.fakes.llm import FakeLLM, error, last_user_text, text
from tests.fakes.telegram_api import BOT, TOKEN, FakeTelegram
from tests.fakes.telegram_harness import Recorder, agent_channel, make_channel, running
from tests.resilience.harness import until

pytestmark = [
    # PTB 22 warns that RetryAfter.retry_after will become a timedelta when it builds one from
    # a 429; the channel reads either form.
    pytest.mark.filterwarnings(
        "ignore:Deprecated since version .*attribute `retry_after`"
        ":telegram.warnings.PTBDeprecationWarning"
    ),
]


@pytest.fixture
def fake(fake_telegram: FakeTelegram) -> FakeTelegram:
    """The fake Bot API; `fake.url` and `fake.file_url` are PTB's base URLs."""
    return fake_telegram


async def test_allowed_user_is_answered_in_their_chat(fake: FakeTelegram, tmp_path: Path) -> None:
    """An allowed user's message reaches the handler and the reply goes back as HTML."""
    handler = Recorder(lambda m: f"**echo**: {m.text}")
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("hello there")
        sent = await fake.wait_sent(1)
    assert sent[0]["chat_id"] == 42
    assert sent[0]["parse_mode"] == "HTML"
    assert sent[0]["text"] == "<b>echo</b>: hello there"
    [message] = handler.seen
    assert (message.channel, message.chat_id, message.sender_id) == ("telegram", "42", "42")
    assert message.key == "telegram:42"
    assert message.sender_name == "Alice" and not message.is_group


async def test_stranger_gets_no_handler_call_download_or_typing(
    fake: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sender outside allow_from costs nothing: no handler, no getFile, no typing; logged once."""
    photo = fake.add_file(b"jpeg", file_id="ph1", unique_id="u1", path="photos/a.jpg")
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler, allow_from=["7"])):
        fake.message("let me in", user_id=666, chat_id=666, username="mallory")
        fake.message(
            None,
            user_id=666,
            chat_id=666,
            photo=[{**photo, "width": 9, "height": 9}],
            caption="look",
        )
        fake.message("owner here", user_id=7, chat_id=7)  # handled after the stranger's
        await fake.wait_sent(1)
    assert [m.sender_id for m in handler.seen] == ["7"]
    assert fake.calls_to("getFile") == [] and fake.calls_to("download") == []
    assert all(c.params["chat_id"] == 7 for c in fake.calls_to("sendChatAction"))
    assert [p["chat_id"] for p in fake.sent()] == [7]
    refused = [r for r in caplog.records if "refused sender" in r.getMessage()]
    assert len(refused) == 1 and "666" in refused[0].getMessage()


async def test_username_in_allow_from_lets_the_user_in(fake: FakeTelegram, tmp_path: Path) -> None:
    """allow_from accepts @username, case-insensitively."""
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler, allow_from=["@Alice"])):
        fake.message("hi", user_id=99, chat_id=99, username="alice")
        await fake.wait_sent(1)
    assert handler.seen[0].sender_id == "99"


async def test_group_needs_a_mention_or_a_reply_to_the_bot(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """In a group only messages that mention the bot or reply to it are answered."""
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("chatting among ourselves", chat_id=-100)
        fake.message("@memgate_bot what time is it?", chat_id=-100)
        fake.message("and tomorrow?", chat_id=-100, reply_to_bot=True)
        fake.message(None, chat_id=-100, caption="@MEMGATE_BOT see this")
        mention = {"type": "text_mention", "offset": 0, "length": 7, "user": BOT}
        fake.message("Memgate, thanks", chat_id=-100, entities=[mention])
        await fake.wait_sent(4)
    texts = [m.text for m in handler.seen]
    assert texts == ["what time is it?", "and tomorrow?", "see this", "Memgate, thanks"]
    assert all(m.is_group and m.mentioned for m in handler.seen)
    assert all(m.key == "telegram:-100" for m in handler.seen)
    replied = {p["reply_parameters"]["message_id"] for p in fake.sent()}
    assert replied == {int(m.message_id or 0) for m in handler.seen}  # each answers its message


async def test_group_commands_for_another_bot_are_ignored(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """/cmd@otherbot is not ours; /status@memgate_bot and a bare /status are, suffix removed."""
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("/status@other_bot", chat_id=-100)
        fake.message("/status@memgate_bot", chat_id=-100)
        fake.message("/new", chat_id=-100)
        await fake.wait_sent(2)
    assert [m.text for m in handler.seen] == ["/status", "/new"]


@pytest.mark.parametrize(("policy", "answered"), [("open", 2), ("off", 0)])
async def test_group_policy_open_and_off(
    fake: FakeTelegram, tmp_path: Path, policy: str, answered: int
) -> None:
    """group_policy open answers every group message; off answers none, even mentions."""
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler, group_policy=policy)):
        fake.message("no mention", chat_id=-100)
        fake.message("@memgate_bot hi", chat_id=-100)
        fake.message("private", chat_id=42)  # handled last: the group ones were seen before
        await fake.wait_sent(answered + 1)
    assert len([m for m in handler.seen if m.is_group]) == answered


async def test_topic_message_has_its_own_session_and_reply_thread(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """A forum topic message gets session telegram:<chat>:topic:<thread>; replies go there."""

    async def typing_shown() -> None:
        await fake.wait_for(lambda: bool(fake.calls_to("sendChatAction")))

    handler = Recorder(until=typing_shown)  # the turn lasts until the typing indicator is out
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("@memgate_bot in a topic", chat_id=-100, thread_id=7)
        [sent] = await fake.wait_sent(1)
    assert handler.seen[0].key == "telegram:-100:topic:7"
    assert sent["message_thread_id"] == 7 and sent["chat_id"] == -100
    assert fake.calls_to("sendChatAction")[0].params["message_thread_id"] == 7


async def test_long_reply_is_split_within_the_limit(fake: FakeTelegram, tmp_path: Path) -> None:
    """A 9,000-character reply with a code block arrives whole, in valid pieces ≤ 4096 units."""
    prose = " ".join(f"word{i}" for i in range(500))  # ~4,400 characters
    code = "\n".join(f"    value_{i} = compute({i}) * 2" for i in range(130))
    # A run of emoji with no space to cut at: some cut must fall inside it.
    emoji = "😀" * 1200
    reply = f"# Report\n\n{prose}\n\n```python\n{code}\n```\n\n{emoji}\n\nThe end."
    assert len(reply) >= 9000
    handler = Recorder(lambda m: reply)
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("tell me everything")
        await fake.wait_for(lambda: any("The end." in p["plain"] for p in fake.sent()))
    sent = fake.sent()
    assert len(sent) >= 3
    assert all(p["parse_mode"] == "HTML" for p in sent)  # the fake parsed each one: balanced
    assert all(utf16_length(p["text"]) <= 4096 for p in sent)
    assert all(p["text"].count("<pre>") == p["text"].count("</pre>") for p in sent)
    plain = "\n".join(p["plain"] for p in sent)
    assert plain.count("😀") == 1200
    for i in range(500):
        assert f"word{i} " in plain or f"word{i}\n" in plain or plain.endswith(f"word{i}")
    for i in range(130):
        assert f"value_{i} = compute({i}) * 2" in plain
    assert [fake.calls_to("sendMessage")[i].status for i in range(len(sent))] == [200] * len(sent)


async def test_refused_html_is_resent_as_plain_text(fake: FakeTelegram, tmp_path: Path) -> None:
    """On 400 "can't parse entities" the same piece goes out again without parse_mode."""
    fake.fail_next(
        "sendMessage",
        400,
        'Bad Request: can\'t parse entities: Unsupported start tag "x" at byte offset 0',
        match=lambda p: p.get("parse_mode") == "HTML",
    )
    handler = Recorder(lambda m: "**bold** and <x>")
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("format something")
        [sent] = await fake.wait_sent(1)
    first, second = fake.calls_to("sendMessage")
    assert second.status == 200
    assert first.status == 400 and first.params["parse_mode"] == "HTML"
    assert "parse_mode" not in sent
    assert sent["text"] == "**bold** and <x>"


async def test_flood_control_waits_then_delivers_once(fake: FakeTelegram, tmp_path: Path) -> None:
    """A 429 with retry_after 1 is waited out; the message then arrives exactly once."""
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1)
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("hello")
        await handler.wait_delivered(1)  # its delivery is over: no second send of it can follow
    assert [c.status for c in fake.calls_to("sendMessage")] == [429, 200]
    assert fake.penalty_violations == 0
    assert len(fake.sent()) == 1


async def test_other_send_errors_are_logged_and_the_channel_goes_on(
    fake: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A send that fails for good is logged; later messages are still answered."""
    fake.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user")
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("one")
        fake.message("two")
        [sent] = await fake.wait_sent(1)
    assert sent["text"] == "echo: two"
    assert "telegram send failed" in caplog.text


async def test_handler_error_does_not_stop_the_channel(
    fake: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that raises is logged once, with its traceback; the next message is handled."""

    def reply(message: InboundMessage) -> str:
        if message.text == "boom":
            raise RuntimeError("handler bug")
        return "fine"

    async with running(make_channel(fake, tmp_path, Recorder(reply))):
        fake.message("boom")
        fake.message("after")
        [sent] = await fake.wait_sent(1)
    assert sent["text"] == "fine"
    # Its traceback (a task group may wrap the error) in one record, none before or after it.
    logged = [r for r in caplog.records if "RuntimeError: handler bug" in (r.exc_text or "")]
    assert [r.levelno for r in logged] == [logging.ERROR]


async def test_a_failed_turn_is_answered_and_logged_once(
    fake: FakeTelegram,
    runtime: Runtime,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model failing: the agent's one boundary answers with the cause and logs one line; the
    channel adds none and answers the next message."""
    fake_llm.push(error(500, "upstream down"))
    fake_llm.push(text("Back again."))
    async with running(agent_channel(fake, runtime)):
        fake.message("first")
        await fake.wait_sent(1)
        fake.message("second")
        sent = await fake.wait_sent(2)
    assert sent[0]["text"].startswith("Sorry, I could not answer")
    assert sent[1]["text"] == "Back again."
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and lines[0].startswith("llm failed session=telegram:42")


async def test_restart_handles_queued_updates_and_skips_handled_ones(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """After a restart, updates sent while down are handled; already handled ones are not."""
    first = Recorder()
    async with running(make_channel(fake, tmp_path, first)):
        handled = fake.message("before the crash")
        await fake.wait_sent(1)
    state = json.loads((tmp_path / "state" / f"telegram-{BOT['id']}.json").read_text())
    assert state["last_update_id"] == handled
    fake.redeliver()  # as if the process died before Telegram heard the offset
    fake.message("while down 1")
    fake.message("while down 2")
    second = Recorder()
    async with running(make_channel(fake, tmp_path, second)):
        await fake.wait_sent(3)
        fake.message("after restart")
        await fake.wait_sent(4)
    assert [m.text for m in second.seen] == ["while down 1", "while down 2", "after restart"]
    assert [m.text for m in first.seen] == ["before the crash"]


async def test_photo_is_saved_under_media_and_referenced(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """The largest photo size is downloaded to media/telegram/<chat>/ and named in the text."""
    thumb = {"file_id": "small", "file_unique_id": "s1", "width": 90, "height": 90}
    big = fake.add_file(b"\xff\xd8big-jpeg", file_id="big", unique_id="AQADbig", path="p/f.jpg")
    handler = Recorder()
    workspace = tmp_path / "workspace"
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message(
            None, caption="what is this?", photo=[thumb, {**big, "width": 800, "height": 600}]
        )
        await fake.wait_sent(1)
    [message] = handler.seen
    assert message.media == ("media/telegram/42/AQADbig.jpg",)
    assert message.text == "[image: media/telegram/42/AQADbig.jpg]\nwhat is this?"
    assert (workspace / "media/telegram/42/AQADbig.jpg").read_bytes() == b"\xff\xd8big-jpeg"
    assert [c.params["file_id"] for c in fake.calls_to("getFile")] == ["big"]


async def test_voice_document_and_oversized_files(fake: FakeTelegram, tmp_path: Path) -> None:
    """Voice and documents are saved with safe names; a file over 20 MB is only noted."""
    voice = fake.add_file(b"ogg", file_id="v", unique_id="V1", path="voice/file_3.oga")
    doc = fake.add_file(b"%PDF", file_id="d", unique_id="D1", path="documents/x")
    huge = {"file_id": "h", "file_unique_id": "H1", "file_size": 25_000_000}
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message(None, voice={**voice, "duration": 2})
        fake.message(None, document={**doc, "file_name": "../../etc/pass wd.pdf"})
        fake.message(None, document={**huge, "file_name": "movie.mkv"}, caption="too big?")
        await fake.wait_sent(3)
    texts = [m.text for m in handler.seen]
    assert texts[0] == "[voice: media/telegram/42/V1.oga]"
    assert texts[1] == "[file: media/telegram/42/D1-etc_pass_wd.pdf]"
    assert texts[2] == "[file: movie.mkv, 25.0 MB, too large to download]\ntoo big?"
    assert handler.seen[2].media == ()
    assert (tmp_path / "workspace/media/telegram/42/D1-etc_pass_wd.pdf").read_bytes() == b"%PDF"
    assert "h" not in [c.params["file_id"] for c in fake.calls_to("getFile")]


async def test_start_greets_without_the_handler(fake: FakeTelegram, tmp_path: Path) -> None:
    """/start is answered with a greeting and never reaches the handler."""
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("/start")
        [sent] = await fake.wait_sent(1)
    assert handler.seen == []
    assert "memgate" in sent["text"]


async def test_commands_are_registered_only_when_changed(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """setMyCommands is called on the first start, not again when Telegram already has them."""
    async with running(make_channel(fake, tmp_path, Recorder())):
        pass
    async with running(make_channel(fake, tmp_path, Recorder())):
        pass
    assert len(fake.calls_to("setMyCommands")) == 1
    assert len(fake.calls_to("getMyCommands")) == 2
    assert [c["command"] for c in fake.commands] == ["new", "stop", "status", "jobs", "help"]


async def test_typing_runs_while_the_handler_works_and_stops(
    fake: FakeTelegram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sendChatAction repeats while the handler works and stops once it returned."""
    monkeypatch.setattr(channels.telegram.delivery, "TYPING_EVERY", 0.05)
    release = asyncio.Event()

    def typing(chat_id: int) -> list[Any]:
        return [c for c in fake.calls_to("sendChatAction") if c.params["chat_id"] == chat_id]

    async def slow(message: InboundMessage, stream: object = None) -> OutboundMessage:
        await release.wait()
        return OutboundMessage("telegram", message.chat_id, "done")

    async with running(make_channel(fake, tmp_path, slow, allow_from=["42", "7"])):
        fake.message("think hard")
        await fake.wait_for(lambda: len(typing(42)) >= 3)
        release.set()
        await fake.wait_sent(1)
        typed = len(typing(42))
        # A second chat's turn types on the same beat: once it has typed three times, a typing
        # loop left running for chat 42 would have typed again meanwhile.
        release.clear()
        fake.message("think again", chat_id=7, user_id=7)
        await fake.wait_for(lambda: len(typing(7)) >= 3)
        assert len(typing(42)) == typed
        release.set()
        await fake.wait_sent(2)


async def test_a_second_message_is_handled_while_a_turn_runs(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """Messages of one chat reach the handler in order without waiting for the previous turn."""
    release = asyncio.Event()
    seen: list[str] = []

    async def handler(message: InboundMessage, stream: object = None) -> OutboundMessage:
        seen.append(message.text)
        if message.text == "long question":
            await release.wait()
        return OutboundMessage("telegram", message.chat_id, f"re: {message.text}")

    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("long question")
        fake.message("/stop")
        [sent] = await fake.wait_sent(1)
        assert sent["text"] == "re: /stop"
        release.set()
        await fake.wait_sent(2)
    assert seen == ["long question", "/stop"]


async def test_shutdown_lets_a_running_turn_finish(fake: FakeTelegram, tmp_path: Path) -> None:
    """Cancelling run() stops polling first, then waits (within the grace) for running turns."""
    started = asyncio.Event()

    async def handler(message: InboundMessage, stream: object = None) -> OutboundMessage:
        started.set()
        await until(lambda: not channel.connected, 5, "the stop to begin")  # then finish
        return OutboundMessage("telegram", message.chat_id, "finished")

    channel = make_channel(fake, tmp_path, handler, shutdown_grace=5)
    async with running(channel):
        fake.message("slow one")
        await started.wait()
    assert [p["text"] for p in fake.sent()] == ["finished"]


async def test_the_token_never_reaches_the_logs(
    fake: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Even at DEBUG, with httpx logging every URL, no record carries the bot token."""
    caplog.handler.addFilter(RedactingFilter([TOKEN]))  # as `memgate run` installs it
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx")
    photo = fake.add_file(b"jpeg", file_id="p", unique_id="P", path="photos/p.jpg")
    async with running(make_channel(fake, tmp_path, Recorder())):
        fake.message(None, photo=[{**photo, "width": 9, "height": 9}])
        await fake.wait_sent(1)
    assert "getUpdates" in caplog.text  # the URLs were logged…
    assert TOKEN not in caplog.text  # …without the token
    assert TOKEN.split(":")[1] not in caplog.text


async def test_a_wrong_token_fails_start_clearly(fake: FakeTelegram, tmp_path: Path) -> None:
    """Telegram's 401 for the token ends run() with a configuration error (exit 78 in the CLI)."""
    channel = make_channel(fake, tmp_path, Recorder(), token="999:wrong")
    with pytest.raises(TelegramConfigError, match="token"):
        await channel.run()


async def test_start_retries_while_telegram_is_unreachable(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """A 502 from getMe at start is retried; the channel then connects."""
    fake.fail_next("getMe", 502, "Bad Gateway")
    async with running(make_channel(fake, tmp_path, Recorder())):
        pass
    assert [c.status for c in fake.calls_to("getMe")] == [502, 200]


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("telegram", "group_policy", "some"),
        ("telegram", "webhook_listen", "8443"),
        ("telegram", "base_url", "api.telegram.org/bot"),
        ("discord", "api_base", "discord.com/api"),
        ("discord", "gateway_url", "https://gateway.discord.gg"),
    ],
)
def test_bad_channel_settings_are_config_errors(
    tmp_path: Path, section: str, key: str, value: str
) -> None:
    """A bad channel setting fails at load as a ConfigError (exit 78) naming the key."""
    path = tmp_path / "config.yaml"
    path.write_text(f"llm:\n  api_key: x\nchannels:\n  {section}:\n    {key}: {value!r}\n")
    with pytest.raises(ConfigError, match=rf"channels\.{section}\.{key}"):
        load_config(path, env={})


def test_a_missing_token_fails_at_construction(tmp_path: Path) -> None:
    """A token that is no BotFather token is a configuration error naming the key."""
    settings = TelegramConfig(token="", allow_from=["42"], dm_policy="allowlist")
    with pytest.raises(ChannelConfigError, match=r"channels\.telegram\.token"):
        TelegramChannel(Recorder(), settings, workspace=tmp_path, state_dir=tmp_path)


async def test_run_twice_raises(fake: FakeTelegram, tmp_path: Path) -> None:
    """A channel object serves once; a second run() is a bug and raises."""
    channel = make_channel(fake, tmp_path, Recorder())
    async with running(channel):
        pass
    with pytest.raises(RuntimeError, match="already"):
        await channel.run()


# -- the inbox: nothing received is lost to a crash -----------------------------------------------


def inbox_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / f"telegram-{BOT['id']}-inbox.jsonl"


def journaled(tmp_path: Path) -> list[dict[str, Any]]:
    path = inbox_path(tmp_path)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def pending_ids(tmp_path: Path) -> set[int]:
    """Update ids the journal would replay: received, with no done line after them."""
    return telegram_inbox_pending(tmp_path / "state")


def raw_message(update_id: int, text: str, *, message_id: int | None = None) -> dict[str, Any]:
    """A private message update from the allowed user 42, as the Bot API sends it."""
    return {
        "update_id": update_id,
        "message": {
            "message_id": message_id or update_id,
            "date": 1_700_000_000,
            "chat": {"id": 42, "type": "private"},
            "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
            "text": text,
        },
    }


async def test_a_message_received_before_a_crash_is_handled_once_after_it(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """Disk as a kill leaves it (journaled, not stored): the restart hands it over once."""
    release = asyncio.Event()
    first_seen: list[str] = []

    async def stuck(message: InboundMessage, stream: object = None) -> OutboundMessage:
        first_seen.append(message.text)
        await release.wait()  # like an agent waiting for the chat's running turn
        return OutboundMessage("telegram", message.chat_id, "never sent")

    state = tmp_path / "state"
    async with running(make_channel(fake, tmp_path, stuck, shutdown_grace=0.1)):
        fake.message("first")
        second = fake.message("second, queued behind the first")
        # Confirmed: Telegram would not hand it out again. The journal holds it already.
        await fake.wait_for(lambda: fake.confirmed > second and len(first_seen) == 2)
        assert pending_ids(tmp_path) == {second - 1, second}
        crashed = {path: path.read_bytes() for path in state.iterdir()}  # what SIGKILL would leave
    assert first_seen == ["first", "second, queued behind the first"]
    for path in state.iterdir():
        path.unlink()
    for path, data in crashed.items():
        path.write_bytes(data)
    fake.redeliver()  # and Telegram hands both out again, as it would without a confirmation
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        await fake.wait_sent(2)
        fake.message("after the restart")
        await fake.wait_sent(3)
    assert [m.text for m in handler.seen] == [
        "first",
        "second, queued behind the first",
        "after the restart",
    ]
    assert [m.message_id for m in handler.seen][:2] == ["1", "2"]  # how the agent spots a repeat
    assert pending_ids(tmp_path) == set()


async def test_shutdown_leaves_unfinished_messages_for_the_next_start(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """A turn cut by the shutdown grace stays journaled and is replayed at the next start."""
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(message: InboundMessage, stream: object = None) -> OutboundMessage:
        started.set()
        await never.wait()
        return OutboundMessage("telegram", message.chat_id, "never sent")

    async with running(make_channel(fake, tmp_path, stuck, shutdown_grace=0.1)):
        update = fake.message("slow one")
        await started.wait()
    assert pending_ids(tmp_path) == {update}
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        await fake.wait_sent(1)
    assert [m.text for m in handler.seen] == ["slow one"]
    assert pending_ids(tmp_path) == set()


async def test_a_replayed_update_that_cannot_be_taken_is_logged_once_and_finished(
    fake: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At a restart judging the replayed DM fails (a pairing store that raises): the DM is logged
    once and finished, not replayed again; the channel serves the next message."""
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(message: InboundMessage, stream: object = None) -> OutboundMessage:
        started.set()
        await never.wait()
        return OutboundMessage("telegram", message.chat_id, "never sent")

    store = PairingStore(tmp_path / "state")
    options: dict[str, Any] = {"dm_policy": "pairing", "shutdown_grace": 0.1}
    async with running(make_channel(fake, tmp_path, stuck, pairing=store, **options)):
        update = fake.message("left for the next start")
        await started.wait()
    assert pending_ids(tmp_path) == {update}

    class BrokenStore(PairingStore):
        """The store as a failing disk would leave it, were its own errors not caught inside."""

        def is_approved(self, channel: str, sender_id: str) -> bool:
            raise OSError("the pairing file cannot be read")

    broken = BrokenStore(tmp_path / "state")
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler, pairing=broken, **options)):
        fake.message("@memgate_bot in the group", chat_id=-100)  # a group never asks the store
        await fake.wait_sent(1)
    assert [m.text for m in handler.seen] == ["in the group"]
    assert pending_ids(tmp_path) == set()
    failed = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert failed == [f"telegram could not take update update_id={update}"]


async def test_a_redelivered_update_in_flight_is_not_taken_twice(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """Telegram handing out an update again while its turn runs does not start a second turn."""
    release = asyncio.Event()
    seen: list[str] = []

    async def slow(message: InboundMessage, stream: object = None) -> OutboundMessage:
        seen.append(message.text)
        await release.wait()
        return OutboundMessage("telegram", message.chat_id, "done")

    async with running(make_channel(fake, tmp_path, slow)):
        update = fake.message("only once")
        await fake.wait_for(lambda: fake.confirmed > update)
        fake.redeliver()
        fake.message("nudge")  # wakes the long poll, which now returns both
        await fake.wait_for(lambda: len(seen) == 2)
        release.set()
        await fake.wait_sent(2)
    assert seen == ["only once", "nudge"]


async def test_a_torn_or_corrupt_journal_line_is_ignored(
    fake: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A line cut short by a kill costs only itself: the rest of the journal is replayed."""
    path = inbox_path(tmp_path)
    path.parent.mkdir(parents=True)
    lines = [
        json.dumps({"update": raw_message(901, "kept")}),
        "{garbage",
        json.dumps({"update": raw_message(902, "already handled")}),
        json.dumps({"done": 902}),
        json.dumps({"update": raw_message(903, "torn")})[:40],
    ]
    path.write_text("\n".join(lines))
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        await fake.wait_sent(1)
    assert [m.text for m in handler.seen] == ["kept"]
    assert caplog.text.count("skipping an unreadable line") == 2
    assert pending_ids(tmp_path) == set()


# -- updates the SDK cannot parse, retries, odd text, odd messages --------------------------------


async def test_an_update_the_sdk_cannot_parse_is_skipped(
    fake: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A poll missing fields PTB requires is logged (without its text) and polling moves on."""
    caplog.set_level(logging.INFO)
    poll = {"id": "p", "question": "Secret lunch plans?", "options": [{"text": "yes"}]}
    bad = fake.message(None, poll=poll)
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("still there?")
        await fake.wait_sent(1)
    assert [m.text for m in handler.seen] == ["still there?"]
    assert fake.confirmed > bad + 1
    [error] = [r for r in caplog.records if "cannot parse" in r.getMessage()]
    assert error.levelno == logging.ERROR and f"update_id={bad}" in error.getMessage()
    assert "Secret lunch" not in caplog.text
    assert pending_ids(tmp_path) == set()


async def test_a_send_failing_once_with_a_5xx_is_retried(
    fake: FakeTelegram,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 502 on sendMessage is tried again after a short backoff, and the reply arrives once."""
    monkeypatch.setattr(channels.telegram.delivery, "SEND_BACKOFF", 0.01)
    fake.fail_next("sendMessage", 502, "Bad Gateway")
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("hello")
        await handler.wait_delivered(1)  # its delivery is over: no second send of it can follow
    assert [c.status for c in fake.calls_to("sendMessage")] == [502, 200]
    assert [p["text"] for p in fake.sent()] == ["echo: hello"]
    assert "trying again chat_id=42 error=Bad Gateway" in caplog.text
    assert "telegram send failed" not in caplog.text  # that line means given up


async def test_a_send_failing_with_5xx_every_time_is_given_up(
    fake: FakeTelegram,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After SEND_ATTEMPTS 5xx the piece is logged as failed; the next reply goes out."""
    monkeypatch.setattr(channels.telegram.delivery, "SEND_BACKOFF", 0.01)
    for _ in range(channels.telegram.delivery.SEND_ATTEMPTS):
        fake.fail_next("sendMessage", 500, "Internal Server Error")
    async with running(make_channel(fake, tmp_path, Recorder())):
        fake.message("one")
        fake.message("two")
        [sent] = await fake.wait_sent(1)
    assert sent["text"] == "echo: two"
    statuses = [c.status for c in fake.calls_to("sendMessage")]
    assert statuses == [500] * channels.telegram.delivery.SEND_ATTEMPTS + [200]
    assert "telegram send failed chat_id=42 error=Internal Server Error" in caplog.text


async def test_lone_surrogates_in_and_out_are_replaced(fake: FakeTelegram, tmp_path: Path) -> None:
    """A lone surrogate in text, entities' span or name becomes U+FFFD; a reply with one is sent."""
    handler = Recorder(lambda m: f"echo \udc00 {m.text}")
    async with running(make_channel(fake, tmp_path, handler)):
        fake.message("@memgate_bot broken \ud800 text", chat_id=-100)
        fake.message("/status\ud83d", username="x\udfff")
        await fake.wait_sent(2)
    assert [m.text for m in handler.seen] == ["broken \ufffd text", "/status\ufffd"]
    assert [p["plain"] for p in fake.sent()] == [
        "echo \ufffd broken \ufffd text",
        "echo \ufffd /status\ufffd",
    ]


async def test_a_sticker_gets_a_short_notice(fake: FakeTelegram, tmp_path: Path) -> None:
    """Unsupported messages from allowed senders get a notice; strangers and groups do not."""
    sticker = {
        "file_id": "s",
        "file_unique_id": "S",
        "type": "regular",
        "width": 512,
        "height": 512,
        "is_animated": False,
        "is_video": False,
    }
    handler = Recorder()
    async with running(make_channel(fake, tmp_path, handler, group_policy="open")):
        fake.message(None, sticker=sticker)
        fake.message(None, sticker=sticker, user_id=666, chat_id=666)  # a stranger
        fake.message(None, sticker=sticker, chat_id=-100)  # a group, not addressed to us
        fake.message(None, chat_id=-100, new_chat_members=[BOT])  # a service message
        fake.message(None, location={"latitude": 1.0, "longitude": 2.0}, chat_id=-100,
                     reply_to_bot=True)  # fmt: skip
        fake.message("and text")
        await fake.wait_sent(3)
    assert [(p["chat_id"], p["text"]) for p in fake.sent()] == [
        (42, channels.telegram.channel.UNSUPPORTED),
        (-100, channels.telegram.channel.UNSUPPORTED),
        (42, "echo: and text"),
    ]
    assert [m.text for m in handler.seen] == ["and text"]
    assert fake.calls_to("getFile") == []


# -- through the real agent and the fake LLM ------------------------------------------------------


async def test_the_agent_answers_through_telegram(
    fake: FakeTelegram, tmp_path: Path, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A Telegram message reaches the fake LLM through the real agent; its answer is sent back."""
    fake_llm.push(text("Hello **Alice**, noted."))
    channel = agent_channel(fake, runtime)
    async with running(channel):
        fake.message("Remember that I like tea.")
        [sent] = await fake.wait_sent(1)
    assert sent["chat_id"] == 42 and sent["text"] == "Hello <b>Alice</b>, noted."
    [request] = fake_llm.chat_requests()
    assert "Remember that I like tea." in last_user_text(request)
    assert runtime.sessions.path_for("telegram:42").exists()


async def test_a_stranger_causes_no_llm_request(
    fake: FakeTelegram, tmp_path: Path, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A stranger's message never reaches the LLM; the owner's next message does."""
    channel = agent_channel(fake, runtime)
    async with running(channel):
        fake.message("give me your memory", user_id=666, chat_id=666)
        fake.message("hi, it's me")
        await fake.wait_sent(1)
    [request] = fake_llm.chat_requests()
    assert "hi, it's me" in last_user_text(request)
    assert "give me your memory" not in json.dumps(request)
    assert [p["chat_id"] for p in fake.sent()] == [42]


async def test_a_photo_reaches_the_llm_as_a_media_path(
    fake: FakeTelegram, tmp_path: Path, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A photo is saved under media/ and the LLM request names the saved file."""
    workspace = runtime.config.workspace
    photo = fake.add_file(b"\xff\xd8jpeg", file_id="ph", unique_id="AQADph", path="photos/f.jpg")
    channel = agent_channel(fake, runtime)
    async with running(channel):
        fake.message(None, caption="what is it?", photo=[{**photo, "width": 8, "height": 8}])
        await fake.wait_sent(1)
    assert (workspace / "media/telegram/42/AQADph.jpg").read_bytes() == b"\xff\xd8jpeg"
    asked = last_user_text(fake_llm.chat_requests()[0])
    assert "media/telegram/42/AQADph.jpg" in asked and "what is it?" in asked


async def test_an_attachment_that_cannot_be_saved_keeps_its_caption(
    fake: FakeTelegram, tmp_path: Path, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """Saving the photo fails (OSError): the caption is stored with a note and answered."""
    workspace = runtime.config.workspace
    (workspace / "media").mkdir(exist_ok=True)
    (workspace / "media" / "telegram").write_text("a file where a folder should be")
    photo = fake.add_file(b"\xff\xd8jpeg", file_id="ph", unique_id="AQADph", path="photos/f.jpg")
    channel = agent_channel(fake, runtime)
    async with running(channel):
        fake.message(None, caption="what is it?", photo=[{**photo, "width": 8, "height": 8}])
        [sent] = await fake.wait_sent(1)
    assert sent["text"] == "echo: [image: could not be saved]\nwhat is it?"
    session = await runtime.sessions.get("telegram:42")
    assert session.messages[0]["content"] == "[image: could not be saved]\nwhat is it?"


# -- webhook mode ---------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("tornado") is not None, reason="webhooks installed")
def test_webhook_mode_without_tornado_fails_at_construction(tmp_path: Path) -> None:
    """webhook_url without python-telegram-bot[webhooks] is a configuration error, said at once."""
    with pytest.raises(ChannelConfigError, match=r"webhooks"):
        settings = TelegramConfig(
            token=TOKEN,
            allow_from=["42"],
            dm_policy="allowlist",
            webhook_url="https://bot.example.org/telegram",
        )
        TelegramChannel(Recorder(), settings, workspace=tmp_path, state_dir=tmp_path)


async def test_webhook_mode_serves_updates_with_the_secret(
    fake: FakeTelegram, tmp_path: Path, unused_tcp_port: int
) -> None:
    """With webhook_url set, setWebhook carries URL and secret; only posts with the secret count."""
    pytest.importorskip("tornado")
    import aiohttp

    handler = Recorder()
    channel = make_channel(
        fake,
        tmp_path,
        handler,
        webhook_url="https://bot.example.org/tg-hook",
        webhook_listen=f"127.0.0.1:{unused_tcp_port}",
        webhook_secret="s3cret-value",
    )
    local = f"http://127.0.0.1:{unused_tcp_port}/tg-hook"
    update = {
        "update_id": 5000,
        "message": {
            "message_id": 1,
            "date": 1_700_000_000,
            "chat": {"id": 42, "type": "private"},
            "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
            "text": "via webhook",
        },
    }
    async with running(channel), aiohttp.ClientSession() as http:
        [hook] = fake.calls_to("setWebhook")
        assert hook.params["url"] == "https://bot.example.org/tg-hook"
        assert hook.params["secret_token"] == "s3cret-value"
        forged = await http.post(local, json={**update, "update_id": 4999})
        assert forged.status == 403
        headers = {"X-Telegram-Bot-Api-Secret-Token": "s3cret-value"}
        accepted = await http.post(local, json=update, headers=headers)
        assert accepted.status == 200
        [sent] = await fake.wait_sent(1)
    assert sent["text"] == "echo: via webhook"
    assert [m.text for m in handler.seen] == ["via webhook"]
    # Journaled before the 200 went back to Telegram, like a polled update; then finished.
    assert [r["update"]["update_id"] for r in journaled(tmp_path) if "update" in r] == [5000]
    assert pending_ids(tmp_path) == set()


async def test_a_webhook_telegram_refuses_fails_start_clearly(
    fake: FakeTelegram, tmp_path: Path, unused_tcp_port: int
) -> None:
    """setWebhook answered 400: run() ends at once with a configuration error giving Telegram's
    reason (exit 78 in the CLI), not a retry, nor the bare SDK error."""
    pytest.importorskip("tornado")
    reason = "Bad Request: bad webhook: HTTPS url must be provided for webhook"
    fake.fail_next("setWebhook", 400, reason)
    channel = make_channel(
        fake,
        tmp_path,
        Recorder(),
        webhook_url="https://bot.example.org/tg-hook",
        webhook_listen=f"127.0.0.1:{unused_tcp_port}",
    )
    with pytest.raises(TelegramConfigError, match="url must be provided for webhook"):
        await channel.run()
    assert len(fake.calls_to("setWebhook")) == 1
    assert not channel.connected


async def test_an_instant_answer_leaves_no_unawaited_typing_coroutine(
    fake: FakeTelegram, tmp_path: Path
) -> None:
    """A reply ready before the typing loop starts (a command) cancels it without a warning."""

    async def instant(message: InboundMessage, stream: object = None) -> OutboundMessage:
        return OutboundMessage("telegram", message.chat_id, "Stopped.")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with running(make_channel(fake, tmp_path, instant)):
            fake.message("/stop")
            await fake.wait_sent(1)
        gc.collect()
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []
