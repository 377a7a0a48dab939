"""The commands memgate's own texts name, as typed on Slack (`/memgate help`, `/memgate pair CODE`,
`/memgate approve ID`), where a message starting with `/` never reaches the app; and as they stand
on any other platform. The real Slack and Telegram SDKs against the fakes."""

from __future__ import annotations

import asyncio
import contextvars
import re
from pathlib import Path
from typing import Any

from channels.pairing import PairingStore
from gateway.bus import InboundMessage, typed_command
from gateway.service.run import chat_ready, chat_sender
from gateway.tools.approvals import Approvals, Decision
from gateway.tools.registry import turn_stream
from tests.conftest import RuntimeFactory
from tests.fakes.llm import FakeLLM, is_background, is_consolidation, text, tool_call, tool_results
from tests.fakes.slack_api import (
    ALICE,
    DM,
    MALLORY,
    STRANGER_DM,
    FakeSlack,
    Recorder,
    fake_slack,
    serving,
)
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running

# A command written at the start of a line or after a space, as a person would copy it.
NAMED = re.compile(r"(?:^|\s)(/[a-z]+)", re.MULTILINE)


def named(text: str) -> set[str]:
    """The commands `text` names, by their first word (`/memgate`, `/new`)."""
    return set(NAMED.findall(text))


def chat(body: dict[str, Any]) -> bool:
    """The chat's own model calls (not a background agent's, not consolidation's)."""
    return not is_background(body) and not is_consolidation(body)


async def answer(fake: FakeSlack, channel: str, user: str, words: str) -> str:
    """What the bot answers `user` typing `/memgate WORDS` in `channel`."""
    before = len(fake.texts(channel))
    await fake.slash(channel, user, words)
    await fake.wait_for(lambda: len(fake.texts(channel)) > before)
    return fake.texts(channel)[before]


async def test_help_on_slack_names_every_command_through_memgate(
    make_runtime: RuntimeFactory,
) -> None:
    """`/memgate help` lists `/memgate new`, `/memgate pair CODE` and, inside the explanations,
    `/memgate jobs cancel ID` and `/memgate forget yes`: no bare `/new` Slack would refuse; an
    unknown command is named the same way."""
    async with make_runtime() as runtime, fake_slack() as fake:
        workspace = runtime.config.workspace
        async with serving(fake, runtime.agent.handle, workspace):
            listing = await answer(fake, DM, ALICE, "help")
            unknown = await answer(fake, DM, ALICE, "frobnicate")
            again = await answer(fake, DM, ALICE, "/help")  # typed with its slash, as elsewhere
    lines = listing.splitlines()
    assert lines[0] == "Commands:"
    assert lines[1].startswith("/memgate new — start a fresh conversation")
    assert any(line.startswith("/memgate pair CODE — ") for line in lines)
    assert "/memgate jobs cancel ID removes one" in listing
    assert "then /memgate forget yes removes them" in listing
    assert named(listing) == {"/memgate"}
    assert unknown.startswith("Unknown command /memgate frobnicate.")
    assert again == listing


async def test_telegram_help_still_names_the_bare_commands(
    make_runtime: RuntimeFactory, fake_telegram: FakeTelegram
) -> None:
    """On Telegram, where `/new` reaches the bot, /help lists `/new`, never `/memgate new`."""
    async with make_runtime() as runtime, running(agent_channel(fake_telegram, runtime)):
        fake_telegram.message("/help")
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent(42)) == 1)
    listing = fake_telegram.sent(42)[0]["text"]
    assert "/new — start a fresh conversation" in listing
    assert "/pair CODE — " in listing and "/jobs cancel ID removes one" in listing
    assert "/memgate" not in listing


async def test_pairing_on_slack_names_the_command_the_owner_types(tmp_path: Path) -> None:
    """A stranger's code names `/memgate pair CODE`; the owner's `/memgate pair` list says
    so too, and typing the command the stranger was given lets them in."""
    pairing = PairingStore(tmp_path / "state")
    options = {"dm_policy": "pairing", "pairing": pairing}
    async with fake_slack() as fake, serving(fake, Recorder(), tmp_path, **options):
        await fake.say(STRANGER_DM, MALLORY, "let me in")
        await fake.wait_for(lambda: fake.texts(STRANGER_DM))
        [code] = [p.code for p in pairing.pending("slack")]
        [given] = fake.texts(STRANGER_DM)
        listing = await answer(fake, DM, ALICE, "pair")
        typed = re.search(r"/memgate (pair \w+)", given)
        assert typed is not None
        approved = await answer(fake, DM, ALICE, typed[1])
    assert f"/memgate pair {code} in their chat with me" in given
    assert named(given) == {"/memgate"}
    assert "send /memgate pair CODE" in listing and code in listing
    assert approved == f"Approved {MALLORY} (id {MALLORY}): their next message will be answered."
    assert pairing.is_approved("slack", MALLORY)


async def test_memory_and_job_replies_on_slack_name_commands_through_memgate(
    make_runtime: RuntimeFactory,
) -> None:
    """/forget's hints, the guest's refusal, /jobs' usage and /approve's answers name
    `/memgate forget TEXT`, `/memgate memory`, `/memgate jobs`, never a bare command."""
    tools = {"exec": {"enabled": True}}
    async with make_runtime({"tools": tools}) as runtime, fake_slack() as fake:
        workspace = runtime.config.workspace
        allow = {"allow_from": [ALICE, "*"], "dm_policy": "open"}
        async with serving(fake, runtime.agent.handle, workspace, **allow):
            hint = await answer(fake, DM, ALICE, "forget")
            nothing = await answer(fake, DM, ALICE, "forget yes")
            usage = await answer(fake, DM, ALICE, "jobs frobnicate")
            refused = await answer(fake, STRANGER_DM, MALLORY, "memory")
            deny = await answer(fake, STRANGER_DM, MALLORY, "deny 3f2a")
    assert hint == (
        "Send /memgate forget TEXT: I show the lines of memory that hold it, "
        "then /memgate forget yes."
    )
    assert nothing == "Nothing waits to be forgotten here: send /memgate forget TEXT first."
    assert usage == "Usage: /memgate jobs, or /memgate jobs cancel ID"
    assert refused == (
        "Only the owner can use /memgate memory and /memgate forget, in a private chat with me."
    )
    assert deny == "Only the owner can /memgate deny, in a private chat."


class Shown:
    """A turn's stream that keeps its tool notes."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.changed = asyncio.Event()

    async def write(self, text: str) -> None:
        """Text is not expected here."""

    async def status(self, note: str) -> None:
        self.notes.append(note)
        self.changed.set()


async def test_an_approval_shown_in_the_turns_stream_names_the_slack_commands() -> None:
    """An approval request no message could carry, shown in the turn's own stream instead,
    offers `/memgate approve ID` on Slack; `/approve` without an id answers with the same."""
    approvals = Approvals(timeout=10.0)  # no way to send a message: the stream shows it
    owner = InboundMessage("slack", DM, ALICE, "/approve", sender_is_owner=True)
    stream = Shown()
    turn = contextvars.copy_context()  # the asking turn's, whose stream is set
    turn.run(turn_stream.set, stream)
    asking = asyncio.create_task(approvals.ask(owner, "touch approved.txt"), context=turn)
    async with asyncio.timeout(5):
        await stream.changed.wait()
    [ident] = approvals.waiting()
    [note] = stream.notes
    assert note.endswith(f"Reply /memgate approve {ident} or /memgate deny {ident}.")
    assert approvals.answer(True, "", owner) == f"Waiting: {ident}. Send /memgate approve ID."
    assert approvals.answer(True, ident, owner) == "Approved: running it."
    assert await asking is Decision.APPROVED


def test_a_command_is_typed_as_it_stands_off_slack() -> None:
    """Only Slack writes a command through its slash command; everywhere else it is unchanged."""
    assert typed_command("slack", "/approve 3f2a") == "/memgate approve 3f2a"
    for channel in ("telegram", "discord", "matrix", "terminal"):
        assert typed_command(channel, "/approve 3f2a") == "/approve 3f2a"


async def test_a_background_tasks_start_and_listing_name_the_slack_commands(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """spawn's answer, which the model passes on, names `/memgate tasks` and `/memgate stop` on
    Slack; `/memgate tasks` lists the task and `/memgate stop` stops it."""
    fake_llm.push(tool_call("spawn", {"task": "summarise my notes", "label": "notes"}), match=chat)
    fake_llm.push(text("Started it."), match=chat)
    held = asyncio.Event()  # the background agent's call, until the end
    fake_llm.push(text("never sent"), hold=held, match=is_background)
    async with make_runtime() as runtime, fake_slack() as fake:
        background = runtime.agent.subagents
        assert background is not None
        async with serving(fake, runtime.agent.handle, runtime.config.workspace) as channel:
            work = asyncio.create_task(
                background.run(
                    runtime.agent.job_message, chat_sender([channel]), chat_ready([channel])
                )
            )
            try:
                await fake.say(DM, ALICE, "summarise my notes in the background")
                await fake.wait_for(lambda: "Started it." in fake.texts(DM))
                listing = await answer(fake, DM, ALICE, "tasks")
                stopped = await answer(fake, DM, ALICE, "stop")
            finally:
                held.set()
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
    [result] = [r for r in fake_llm.chat_requests() if tool_results(r)]
    [started] = tool_results(result)
    assert started.startswith("Started background task ")
    assert started.endswith("/memgate tasks lists it and /memgate stop stops it.")
    assert listing.startswith("Background tasks:\n") and "notes (running" in listing
    assert stopped == "Stopped 1 background task."
