"""Slack beside the adapter: `memgate doctor` (login, the scopes the bot lacks, Socket Mode),
`memgate status`, replies streamed by chat.update, files for the media reader, and mrkdwn."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from channels.errors import SlackChannelError
from channels.slack.connect import probe_slack
from channels.slack.mrkdwn import render_mrkdwn
from gateway.bus import InboundMessage, OutboundMessage, ReplyStream
from memory.fileio import ensure_private_dir
from tests.conftest import memgate
from tests.fakes.llm import FakeLLM
from tests.fakes.slack_api import ALICE, DM, FakeSlack, Recorder, fake_slack, serving

pytestmark = pytest.mark.timeout(120)


def slack_config(tmp_path: Path, llm_url: str, fake: FakeSlack) -> Path:
    ensure_private_dir(tmp_path / "workspace")
    ensure_private_dir(tmp_path / "state")
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
state_dir: {tmp_path / "state"}
llm:
  base_url: {llm_url}
  max_retries: 0
  timeout: 30
channels:
  slack:
    enabled: true
    token: {fake.token}
    app_token: {fake.app_token}
    allow_from: ["{ALICE}"]
    api_base: {fake.api_base}
"""
    )
    return path


async def test_probe_names_the_scopes_the_bot_lacks() -> None:
    """The doctor's probe passes with every scope, and names each missing one otherwise."""
    async with fake_slack() as fake:
        options = {"token": fake.token, "app_token": fake.app_token, "api_base": fake.api_base}
        line = await probe_slack(**options)
        fake.scopes = [s for s in fake.scopes if s not in ("files:read", "im:history")]
        with pytest.raises(SlackChannelError) as missing:
            await probe_slack(**options)
        with pytest.raises(SlackChannelError) as refused:
            await probe_slack(**{**options, "token": "xoxb-wrong"})
    assert "logged in as memgate" in line and "Socket Mode ok" in line
    assert "lacks the scopes im:history, files:read" in str(missing.value)
    assert "channels.slack.token" in str(refused.value) and "invalid_auth" in str(refused.value)


async def test_doctor_and_status_show_slack(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """`memgate doctor` has a slack line naming a missing scope; `memgate status` shows the
    section with its tokens masked."""
    async with fake_slack() as fake:
        fake.scopes = [s for s in fake.scopes if s != "files:read"]
        config = slack_config(tmp_path, fake_llm.url, fake)
        code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
        status_code, status, _ = await memgate("status", "--config", str(config), home=tmp_path)
    assert code == 1, out + err
    assert "✗ slack: the bot lacks the scopes files:read" in out
    assert status_code == 0
    [line] = [line for line in status.splitlines() if line.strip().startswith("slack:")]
    assert "enabled" in line and fake.token not in status and fake.app_token not in status


class Streamer:
    """A handler that writes its answer into the stream: a first part, then (once Slack shows
    it) the rest, and returns the answer whole once an edit went out."""

    def __init__(self, answer: str, fake: FakeSlack) -> None:
        self.answer = answer
        self.fake = fake

    async def __call__(
        self, message: InboundMessage, stream: ReplyStream | None = None
    ) -> OutboundMessage:
        assert stream is not None
        await stream.write(self.answer[:300])
        await self.fake.wait_for(lambda: self.fake.texts(DM))
        await stream.write(self.answer[300:])
        await self.fake.wait_for(lambda: self.fake.of("chat.update"))
        return OutboundMessage(message.channel, message.chat_id, self.answer)


async def test_a_streamed_reply_ends_equal_to_the_answer(tmp_path: Path) -> None:
    """With streaming on, the reply is posted once and then edited in place; the message ends
    holding the whole answer, rendered as mrkdwn."""
    answer = "**Bold** start. " + " ".join(f"word{n}" for n in range(120))
    async with (
        fake_slack() as fake,
        serving(fake, Streamer(answer, fake), tmp_path, streaming="on"),
    ):
        await fake.say(DM, ALICE, "stream it")
        await fake.wait_for(lambda: fake.texts(DM) == [render_mrkdwn(answer)])
    assert len(fake.of("chat.postMessage")) == 1
    assert fake.of("chat.postMessage")[0].args["text"] != render_mrkdwn(answer)  # a first part


async def test_files_reach_the_media_reader(tmp_path: Path) -> None:
    """A shared file is downloaded with the bot token into the chat's media folder and named
    in the message the agent gets."""
    recorder = Recorder()
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        shared = fake.add_file("F0001", "notes.txt", b"remember the milk", "text/plain")
        await fake.say(DM, ALICE, "see attached", subtype="file_share", files=[shared])
        await fake.wait_for(lambda: fake.texts(DM))
    [inbound] = recorder.inbound
    [path] = inbound.media
    assert path.startswith(f"media/slack/{DM}/")
    assert (tmp_path / path).read_bytes() == b"remember the milk"
    assert inbound.text == f"see attached\n[file: {path}]"


def test_mrkdwn_rendering() -> None:
    """Markdown becomes mrkdwn: emphasis, links and headings converted, Slack's control
    characters escaped, code left as written."""
    markdown = (
        "# Plan\n**do** *it* ~~not~~ [docs](https://x.io/a) a<b&c `x*y*`\n```py\nif a<b: **x**\n```"
    )
    assert render_mrkdwn(markdown) == (
        "*Plan*\n*do* _it_ ~not~ <https://x.io/a|docs> a&lt;b&amp;c `x*y*`\n```\n"
        "if a&lt;b: **x**\n```"
    )


async def test_refused_mrkdwn_is_sent_as_plain_text(tmp_path: Path) -> None:
    """When Slack refuses a reply's formatting, the same reply goes out as plain text (mrkdwn
    off), its Markdown as the model wrote it."""
    recorder = Recorder(lambda text: "**done**: a<b")
    async with fake_slack() as fake, serving(fake, recorder, tmp_path):
        fake.refuse("chat.postMessage", "invalid_blocks")
        await fake.say(DM, ALICE, "format it")
        await fake.wait_for(lambda: fake.texts(DM))
    refused, plain = fake.of("chat.postMessage")
    assert refused.args["text"] == "*done*: a&lt;b"
    assert fake.sent(DM) == [{**fake.sent(DM)[0], "text": "**done**: a<b", "mrkdwn": False}]
    assert plain.args.get("mrkdwn") is False


class StopsMidway:
    """A handler that shows the start of its answer and then never finishes (the process is
    stopped under it)."""

    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake

    async def __call__(
        self, message: InboundMessage, stream: ReplyStream | None = None
    ) -> OutboundMessage:
        assert stream is not None
        await stream.write("x" * 300)
        await self.fake.wait_for(lambda: self.fake.texts(DM))
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_reply_cut_by_a_stop_is_finished_in_its_message(tmp_path: Path) -> None:
    """A streamed reply stopped halfway is answered at the next start in the message it had
    already put in the chat (edited to the whole answer), not in a second one."""
    state = tmp_path / "state"
    async with fake_slack() as fake:
        options = {"streaming": "on", "state_dir": state}
        async with serving(fake, StopsMidway(fake), tmp_path, **options):
            await fake.say(DM, ALICE, "long one")
            await fake.wait_for(lambda: fake.texts(DM))
        [shown] = fake.sent(DM)
        recorder = Recorder(lambda text: "the whole answer")
        async with serving(fake, recorder, tmp_path, **options):
            await fake.wait_for(lambda: fake.texts(DM) == ["the whole answer"])
    assert [m["ts"] for m in fake.sent(DM)] == [shown["ts"]]
    assert len(fake.of("chat.postMessage")) == 1
