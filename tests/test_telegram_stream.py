"""Replies shown on Telegram while they are written: drafts, an edited message, /stop, off."""

from __future__ import annotations

import itertools
import json

import pytest

from channels.live import EVERY
from channels.telegram.html import render_html
from gateway.service.app import Runtime
from tests.fakes.llm import FakeLLM, text, tool_call
from tests.fakes.telegram_api import Call, FakeTelegram, parse_html
from tests.fakes.telegram_harness import agent_channel, running
from tests.resilience.harness import until

pytestmark = [
    # PTB 22 warns that RetryAfter.retry_after will become a timedelta (see test_telegram.py).
    pytest.mark.filterwarnings(
        "ignore:Deprecated since version .*attribute `retry_after`"
        ":telegram.warnings.PTBDeprecationWarning"
    ),
]

GROUP = -100123
ANSWER = (
    "**Streaming** lets the person read the first words while the rest is still being written. "
) * 5
SPACING = EVERY - 0.05  # what the fake sees between two calls the channel spaced by EVERY


def live_calls(fake: FakeTelegram, chat_id: int) -> list[float]:
    """When the bot updated a reply in `chat_id` (drafts, edits): the calls paced per chat."""
    methods = ("sendMessageDraft", "editMessageText")
    return [c.at for c in fake.calls if c.method in methods and c.params.get("chat_id") == chat_id]


def assistant_lines(runtime: Runtime, key: str) -> list[str]:
    path = runtime.sessions.path_for(key)
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    return [line["content"] for line in lines if line.get("role") == "assistant"]


async def test_private_chat_drafts_then_one_message(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """In a DM drafts show the text as it streams, the first before the stream ends; then one
    message holds the whole reply."""
    fake_llm.stream_rate = 50
    fake_llm.push(text(ANSWER))
    async with running(agent_channel(fake_telegram, runtime)):
        fake_telegram.message("tell me about streaming")
        await fake_telegram.wait_sent(1)
    drafts = fake_telegram.drafts(42)
    assert len(drafts) >= 2
    assert all(ANSWER.startswith(d["text"]) for d in drafts)
    first_draft = fake_telegram.calls_to("sendMessageDraft")[0].at
    [(_, stream_end)] = fake_llm.streams
    assert first_draft < stream_end
    assert fake_telegram.shown(42) == [parse_html(render_html(ANSWER.strip()))]
    calls = live_calls(fake_telegram, 42)
    assert all(b - a >= SPACING for a, b in itertools.pairwise(calls))
    assert assistant_lines(runtime, "telegram:42") == [ANSWER.strip()]


async def test_tool_note_shows_in_the_draft(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """While a tool runs the draft says which one ("reading notes.md…"); the answer follows."""
    (runtime.config.workspace / "notes.md").write_text("tea")
    fake_llm.push(tool_call("read_file", {"path": "notes.md"}))
    fake_llm.push(text("You like tea."))
    async with running(agent_channel(fake_telegram, runtime)):
        fake_telegram.message("what do I like?")
        await fake_telegram.wait_sent(1)
    assert fake_telegram.drafts(42)[0]["text"] == "reading notes.md…"
    assert fake_telegram.shown(42) == ["You like tea."]


async def test_group_reply_is_one_message_edited(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """In a group the first piece is sent, then edited at most once a second; the last edit
    holds the whole reply rendered as HTML."""
    fake_llm.stream_rate = 50
    fake_llm.push(text(ANSWER))
    async with running(agent_channel(fake_telegram, runtime, group_policy="open")):
        asked = fake_telegram.message("tell me", chat_id=GROUP)
        whole = parse_html(render_html(ANSWER.strip()))
        await fake_telegram.wait_for(lambda: fake_telegram.shown(GROUP) == [whole])
    assert asked
    assert fake_telegram.drafts() == []
    [first] = fake_telegram.sent(GROUP)
    assert "reply_parameters" in first and "parse_mode" not in first
    assert len(first["text"]) >= 200 or len(first["text"]) < len(ANSWER)
    edits = fake_telegram.calls_to("editMessageText", ok_only=True)
    assert len(edits) >= 2
    assert edits[-1].params["parse_mode"] == "HTML"
    assert edits[-1].params["text"] == render_html(ANSWER.strip())
    calls = live_calls(fake_telegram, GROUP)
    assert all(b - a >= SPACING for a, b in itertools.pairwise(calls))


async def test_long_group_reply_ends_as_three_messages(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """A 9,000-character reply streamed into a group ends as 3 messages holding all of it."""
    paragraph = "A sentence of a long answer that goes on and on for a while. " * 6
    answer = "\n\n".join([paragraph.strip()] * 30)[:9000].rstrip()
    assert len(answer) == 9000
    fake_llm.stream_rate = 1000
    fake_llm.push(text(answer))
    async with running(agent_channel(fake_telegram, runtime, group_policy="open")):
        fake_telegram.message("write a lot", chat_id=GROUP)
        await fake_telegram.wait_for(lambda: len(fake_telegram.shown(GROUP)) == 3, within=30)
        await fake_telegram.wait_for(
            lambda: " ".join(fake_telegram.shown(GROUP)).split() == answer.split(), within=30
        )
    assert len(fake_telegram.shown(GROUP)) == 3
    assert len(fake_telegram.sent(GROUP)) == 3  # each message sent once, then edited
    calls = live_calls(fake_telegram, GROUP)
    assert all(b - a >= SPACING for a, b in itertools.pairwise(calls))


async def test_refused_drafts_fall_back_to_an_edited_message(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """Where Telegram refuses drafts, the DM gets a message that is edited instead."""
    fake_telegram.drafts_refused = True
    fake_llm.stream_rate = 50
    fake_llm.push(text(ANSWER))
    async with running(agent_channel(fake_telegram, runtime)):
        fake_telegram.message("tell me")
        whole = parse_html(render_html(ANSWER.strip()))
        await fake_telegram.wait_for(lambda: fake_telegram.shown(42) == [whole])
    assert len(fake_telegram.calls_to("sendMessageDraft")) == 1
    assert len(fake_telegram.sent(42)) == 1
    assert fake_telegram.calls_to("editMessageText", ok_only=True)


async def test_stop_keeps_the_partial_reply_marked(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """/stop mid-stream: the text shown so far stays, marked (stopped), and is stored once."""
    fake_llm.stream_rate = 50
    fake_llm.push(text("word " * 400))
    async with running(agent_channel(fake_telegram, runtime, group_policy="open")):
        fake_telegram.message("write a lot", chat_id=GROUP)
        await fake_telegram.wait_for(
            lambda: any(len(t) > 40 for t in fake_telegram.shown(GROUP)), within=10
        )
        fake_telegram.message("/stop", chat_id=GROUP)
        await fake_telegram.wait_for(
            lambda: any(t.endswith("(stopped)") for t in fake_telegram.shown(GROUP))
        )
        await fake_telegram.wait_for(lambda: "Stopped." in fake_telegram.shown(GROUP))
    [stored] = assistant_lines(runtime, f"telegram:{GROUP}")
    assert stored.startswith("word word") and stored.endswith("\n\n(stopped)")
    [marked] = [t for t in fake_telegram.shown(GROUP) if t.endswith("(stopped)")]
    assert marked.split() == stored.split()


async def test_streaming_off_sends_the_reply_whole(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """With `streaming: off` there are no drafts or edits and the model is not asked to stream."""
    fake_llm.push(text(ANSWER))
    async with running(agent_channel(fake_telegram, runtime, streaming="off")):
        fake_telegram.message("tell me")
        await fake_telegram.wait_sent(1)
    assert fake_telegram.drafts() == [] and fake_telegram.calls_to("editMessageText") == []
    assert "stream" not in fake_llm.chat_requests()[0]


@pytest.mark.parametrize("streaming", ["on", "off"])
async def test_a_reply_in_two_parts_notes_the_first_in_the_inbox_before_the_second(
    streaming: str, fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """A DM reply (streamed in drafts, or sent whole) ends as two messages; before the second
    goes out the inbox notes the first as out, so a kill between them would send only the
    second again."""
    paragraph = "A sentence of a long answer that goes on and on for a while. " * 50
    fake_llm.stream_rate = 1000
    fake_llm.push(text(f"{paragraph.strip()}\n\n{paragraph.strip()}"))
    noted_before_second: list[bool] = []

    def on_call(call: Call) -> None:
        if call.method == "sendMessage" and fake_telegram.sent(42):  # the second message
            noted_before_second.append({"sent": 1000, "parts": 1} in journal(runtime))

    fake_telegram.on_call = on_call
    async with running(agent_channel(fake_telegram, runtime, streaming=streaming)):
        fake_telegram.message("write a lot")
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent(42)) == 2, within=30)
    assert bool(fake_telegram.drafts(42)) == (streaming == "on")
    assert noted_before_second == [True]
    assert journal(runtime)[-1] == {"done": 1000}


async def test_a_group_reply_finished_in_place_notes_the_parts_already_out(
    fake_telegram: FakeTelegram, fake_llm: FakeLLM, runtime: Runtime
) -> None:
    """A long group reply streams into messages, finishing each part as the next begins; when the
    answer is finished in place, the inbox first notes the parts already out, so a restart
    before the last part is in would send only that."""
    paragraph = "A sentence of a long answer that goes on and on for a while. " * 6
    answer = "\n\n".join([paragraph.strip()] * 30)[:9000].rstrip()
    fake_llm.stream_rate = 1000
    fake_llm.push(text(answer))
    async with running(agent_channel(fake_telegram, runtime, group_policy="open")):
        fake_telegram.message("write a lot", chat_id=GROUP)
        await until(lambda: {"done": 1000} in journal(runtime), 30, "the inbox's done line")
    assert len(fake_telegram.sent(GROUP)) == 3
    lines = journal(runtime)
    assert lines.index({"sent": 1000, "parts": 2}) < lines.index({"done": 1000})


def journal(runtime: Runtime) -> list[dict[str, object]]:
    """The Telegram inbox's lines (the channel's state folder beside the workspace)."""
    path = runtime.config.workspace.parent / "state" / "telegram-123456789-inbox.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]
