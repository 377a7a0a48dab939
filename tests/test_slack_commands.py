"""Commands offered on Slack: a reply's buttons shown as the commands to type, written through
the `/memgate` slash command (Slack keeps any message starting with `/` to itself), whether the
reply is sent, streamed or an approval request; and what is shown, typed, does what it says."""

from __future__ import annotations

import re
from pathlib import Path

from channels.slack.events import clean_text, slash_event
from channels.slack.mrkdwn import render_mrkdwn
from gateway.bus import Button, InboundMessage, OutboundMessage, ReplyStream, typed_command
from gateway.service.run import chat_sender
from tests.conftest import RuntimeFactory
from tests.fakes.llm import FakeLLM, text, tool_call, tool_results
from tests.fakes.slack_api import ALICE, BOT_USER, DM, FakeSlack, fake_slack, serving
from tests.sandboxing import needs_bwrap, prepare_workspace

CHOICE = (Button("Approve", "/approve 3f2a"), Button("Deny", "/deny 3f2a"))
OFFERED = "Reply /memgate approve 3f2a or /memgate deny 3f2a."
CAT = "- The user's cat is called Miso."
# A command as a Slack reply offers it: what the owner is told to type.
TYPED = re.compile(r"/memgate (\w+(?: \w+)?)")


def test_a_command_is_offered_as_the_slash_command_that_brings_it_back() -> None:
    """`/approve 3f2a` is offered as `/memgate approve 3f2a`, which arrives as `/approve 3f2a`."""
    assert typed_command("slack", "/approve 3f2a") == "/memgate approve 3f2a"
    words = typed_command("slack", "/forget yes").removeprefix("/memgate ")
    event = slash_event({"channel_id": DM, "user_id": ALICE, "text": words}, BOT_USER, "1.000001")
    assert clean_text(event["text"], BOT_USER) == "/forget yes"


class AsksWhileStreaming:
    """A handler that streams a first part, then answers with a question and its buttons."""

    def __init__(self, fake: FakeSlack) -> None:
        self.fake = fake

    async def __call__(
        self, message: InboundMessage, stream: ReplyStream | None = None
    ) -> OutboundMessage:
        assert stream is not None
        await stream.write("Let me look. " * 20)
        await self.fake.wait_for(lambda: self.fake.texts(DM))
        return OutboundMessage(message.channel, message.chat_id, "Run this?", buttons=CHOICE)


async def test_buttons_are_offered_as_slash_commands_sent_or_streamed(tmp_path: Path) -> None:
    """A message with buttons sent to a chat (an approval request, a job's message, an owed
    answer sent again) and a streamed reply ending with buttons both end with the commands as
    typed in Slack, never the bare `/approve`."""
    async with fake_slack() as fake:
        handler = AsksWhileStreaming(fake)
        async with serving(fake, handler, tmp_path, streaming="on") as channel:
            await fake.say(DM, ALICE, "anything to run?")
            await fake.wait_for(lambda: "Run this?" in "".join(fake.texts(DM)))
            assert await channel.send(OutboundMessage("slack", DM, "Sure?", buttons=CHOICE))
    assert fake.texts(DM) == [
        render_mrkdwn(f"Run this?\n\n{OFFERED}"),
        render_mrkdwn(f"Sure?\n\n{OFFERED}"),
    ]
    assert len(fake.of("chat.update")) >= 1  # the streamed one was finished in its message


async def test_the_owner_forgets_on_slack_by_typing_what_was_offered(
    make_runtime: RuntimeFactory, tmp_path: Path
) -> None:
    """`/memgate forget miso` lists the line and offers `/memgate forget yes`; typed as shown,
    it removes the line."""
    async with make_runtime() as runtime, fake_slack() as fake:
        runtime.memory.write_memory(runtime.memory.read_memory() + f"{CAT}\n")
        workspace = runtime.config.workspace
        async with serving(fake, runtime.agent.handle, workspace):
            await fake.slash(DM, ALICE, "forget miso")
            await fake.wait_for(lambda: fake.texts(DM))
            [listing] = fake.texts(DM)
            assert "Miso" in listing
            assert listing.endswith("Reply /memgate forget yes or /memgate forget no.")
            await fake.slash(DM, ALICE, TYPED.findall(listing)[0])
            await fake.wait_for(lambda: len(fake.texts(DM)) == 2)
        assert "1 line removed" in fake.texts(DM)[1]
        assert "Miso" not in runtime.memory.read_memory()


@needs_bwrap
async def test_an_exec_approval_on_slack_is_answered_by_the_slash_command_it_names(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """exec's request in the owner's DM (the turn streaming its tool note meanwhile) names
    `/memgate approve ID`; typed as shown, the command runs and the turn ends."""
    prepare_workspace(tmp_path)
    tools = {"exec": {"enabled": True, "timeout": 20, "approve_timeout": 20}}
    async with make_runtime({"tools": tools}) as runtime, fake_slack() as fake:
        workspace = runtime.config.workspace
        async with serving(fake, runtime.agent.handle, workspace, streaming="on") as channel:
            assert runtime.agent.tools.approvals is not None
            runtime.agent.tools.approvals.notify = chat_sender([channel])
            fake_llm.push(tool_call("exec", {"command": "touch approved.txt"}))
            fake_llm.push(text("done"), match=lambda body: bool(tool_results(body)))
            await fake.say(DM, ALICE, "run it")
            await fake.wait_for(lambda: any("Run this command?" in t for t in fake.texts(DM)))
            [request] = [t for t in fake.texts(DM) if "Run this command?" in t]
            approve, deny = TYPED.findall(request)
            assert approve.startswith("approve ") and deny == approve.replace("approve", "deny")
            assert "touch approved.txt" in request and "Reply /approve" not in request
            await fake.slash(DM, ALICE, approve)
            await fake.wait_for(lambda: "done" in fake.texts(DM))
        assert (workspace / "approved.txt").exists()
        assert "Approved: running it." in fake.texts(DM)
