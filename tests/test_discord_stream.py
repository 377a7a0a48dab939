"""Replies shown on Discord while they are written: a message edited, split at 2,000 characters."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from channels.base import FENCE, split_message
from channels.live import EVERY
from gateway.bus import InboundMessage, OutboundMessage, ReplyStream
from gateway.service.app import Runtime
from tests.fakes.discord_api import ALICE, DM, FakeDiscord, serving
from tests.fakes.llm import FakeLLM, text

ANSWER = "Streaming lets the person read the first words while the rest is still written. " * 6
SPACING = EVERY - 0.05  # what the fake sees between two calls the channel spaced by EVERY


@pytest.fixture
def fake(fake_discord: FakeDiscord) -> FakeDiscord:
    """The shared fake Discord (tests/conftest.py) under this module's short name."""
    return fake_discord


def workspace(runtime: Runtime) -> Path:
    return runtime.config.workspace


async def test_dm_reply_is_sent_then_edited(
    fake: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """The first piece is sent, then edited about once a second; the last edit is the reply."""
    fake_llm.stream_rate = 50
    fake_llm.push(text(ANSWER))
    async with serving(fake, runtime.agent.handle, workspace(runtime)):
        await fake.send_message(DM, ALICE, "tell me")
        await fake.wait_for(lambda: fake.shown(DM) == [ANSWER.strip()])
    assert len(fake.sent(DM)) == 1
    edits = fake.edits(DM)
    assert len(edits) >= 2
    assert edits[-1].body["content"] == ANSWER.strip()
    times = [r.at for r in fake.edits(DM)]
    assert all(b - a >= SPACING for a, b in itertools.pairwise(times))


async def test_long_reply_splits_with_balanced_fences(
    fake: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A reply past 2,000 characters ends as the usual split: each message under the limit,
    a code block cut by the split closed in one message and reopened in the next."""
    code = "\n".join(f"    value_{n} = compute({n})  # step {n}" for n in range(90))
    answer = f"Here is the script:\n\n```python\n{code}\n```\n\nThat is all. " + "More words. " * 60
    assert len(answer) > 4000
    fake_llm.stream_rate = 1000
    fake_llm.push(text(answer))
    expected = split_message(answer.strip(), 2000)
    async with serving(fake, runtime.agent.handle, workspace(runtime)):
        await fake.send_message(DM, ALICE, "write a script")
        await fake.wait_for(lambda: fake.shown(DM) == expected)
    assert len(expected) >= 3
    assert len(fake.sent(DM)) == len(expected)  # each message sent once
    for content in fake.shown(DM):
        assert len(content) <= 2000
        fences = [line for line in content.split("\n") if FENCE.match(line)]
        assert len(fences) % 2 == 0


async def test_streaming_off_sends_whole(
    fake: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """With `streaming: off` the reply is sent whole and never edited."""
    fake_llm.push(text(ANSWER))
    async with serving(fake, runtime.agent.handle, workspace(runtime), streaming="off"):
        await fake.send_message(DM, ALICE, "tell me")
        await fake.wait_for(lambda: fake.shown(DM) == [ANSWER.strip()])
    assert fake.edits(DM) == []
    assert "stream" not in fake_llm.chat_requests()[0]


async def test_an_answer_unlike_what_streamed_is_sent_whole(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    """A reply that is not what streamed (an error after some text) is sent whole, though a
    finished message of the streamed text is already out: it replaces the message in progress."""
    streamed = "Words that fill more than one Discord message as they stream. " * 40
    first = split_message(streamed, 2000)[0]
    apology = "Sorry, something went wrong while answering (the connection dropped)."

    async def handler(
        message: InboundMessage, stream: ReplyStream | None = None
    ) -> OutboundMessage:
        assert stream is not None
        await stream.write(streamed)
        await fake.wait_for(lambda: first in fake.shown(DM))  # a finished part is out
        return OutboundMessage(message.channel, message.chat_id, apology)

    async with serving(fake, handler, tmp_path):
        await fake.send_message(DM, ALICE, "tell me")
        await fake.wait_for(lambda: apology in fake.shown(DM))
    assert fake.shown(DM) == [first, apology]
