"""The Matrix channel in front of the real agent, against a real Synapse on loopback: real nio
clients for the owner and a stranger, the fake LLM behind the agent."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nio
import pytest

from channels.matrix.channel import ENCRYPTED_NOTICE, MatrixChannel
from channels.pairing import PairingStore
from gateway.bus import (
    Button,
    Handler,
    InboundMessage,
    OutboundMessage,
    ReplyStream,
    media_folder,
)
from gateway.config.models import MatrixConfig
from gateway.service.app import Runtime
from gateway.service.run import chat_sender
from tests.conftest import RuntimeFactory
from tests.fakes.llm import (
    FakeLLM,
    image_parts,
    last_user_text,
    streamed,
    text,
    tool_call,
    tool_results,
)
from tests.samples import jpeg, pdf
from tests.sandboxing import needs_bwrap, prepare_workspace
from tests.synapse import Account, Person, Synapse, joined, person, room_with

pytestmark = pytest.mark.timeout(120)


@dataclass
class World:
    owner: Person
    stranger: Person
    bot: Account
    channel: MatrixChannel

    @property
    def me(self) -> str:
        return self.bot.user_id

    async def dm(self, who: Person | None = None) -> str:
        """A DM room `who` (the owner by default) opens with the bot, once the bot is in it."""
        who = who or self.owner
        room = await room_with(who, bot=self.me, direct=True)
        await joined(who, room, self.me)
        return room

    async def answered(self, room: str, count: int = 1, who: Person | None = None) -> None:
        """Until the bot has posted `count` messages in the room, as `who` sees it."""
        who = who or self.owner
        await who.wait_for(lambda: len(who.posts(room, self.me)) >= count, what="the bot's post")


@asynccontextmanager
async def matrix_bot(
    synapse: Synapse,
    runtime: Runtime,
    handler: Handler | None = None,
    max_media_bytes: int = 25 * 1024 * 1024,
    **settings: Any,
) -> AsyncIterator[World]:
    """The bot's account, an owner and a stranger, and the channel serving until the block ends
    (its messages handed to `handler`, else to the runtime's agent)."""
    owner_account = synapse.register("owner")
    bot = synapse.register("bot")
    config = MatrixConfig(
        enabled=True,
        homeserver=synapse.url,
        user_id=bot.user_id,
        token=bot.access_token,
        allow_from=[owner_account.user_id],
        **settings,
    )
    state_dir = runtime.config.state_dir
    channel = MatrixChannel(
        handler or runtime.agent.handle,
        config,
        workspace=runtime.config.workspace,
        state_dir=state_dir,
        pairing=PairingStore(state_dir),
        shutdown_grace=2,
        max_media_bytes=max_media_bytes,
    )
    owner = await person(synapse, owner_account)
    stranger = await person(synapse, synapse.register("stranger"))
    task = asyncio.create_task(channel.run())
    ready = asyncio.ensure_future(channel.ready.wait())
    try:
        await asyncio.wait([task, ready], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if task.done():
            task.result()  # its error, as it ended
        assert channel.connected, "the bot did not connect within 30 s"
        yield World(owner, stranger, bot, channel)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await owner.close()
        await stranger.close()


def sessions_holding(runtime: Runtime, needle: str) -> list[str]:
    root = runtime.config.workspace / "sessions"
    return [p.name for p in root.glob("*.jsonl") if needle in p.read_text()]


async def test_an_owners_dm_is_answered_as_formatted_text(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """An owner's DM reaches the model; its Markdown answer comes back as HTML with the text as
    the plain body."""
    fake_llm.push(text("Hello, **owner**."))
    async with matrix_bot(synapse, runtime, streaming="off") as world:
        room = await world.dm()
        await world.owner.send(room, "hello from matrix")
        await world.answered(room)
    [reply] = world.owner.posts(room, world.me)
    assert reply["content"]["body"] == "Hello, **owner**."
    assert reply["content"]["format"] == "org.matrix.custom.html"
    assert reply["content"]["formatted_body"] == "<p>Hello, <strong>owner</strong>.</p>"
    [request] = fake_llm.chat_requests()
    assert "hello from matrix" in str(request["messages"][-1]["content"])
    assert sessions_holding(runtime, "hello from matrix")


async def test_a_stranger_gets_a_pairing_code_and_never_reaches_the_model(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A stranger's DM is answered with a pairing code; the model hears only the owner."""
    fake_llm.push(text("owner answered"))
    async with matrix_bot(synapse, runtime, streaming="off") as world:
        theirs = await world.dm(world.stranger)
        await world.stranger.send(theirs, "let me in")
        await world.answered(theirs, who=world.stranger)
        mine = await world.dm()
        await world.owner.send(mine, "barrier")
        await world.answered(mine)
    [code] = world.stranger.posts(theirs, world.me)
    assert "pairing code" in code["content"]["body"]
    assert [m["content"]["body"] for m in world.owner.posts(mine, world.me)] == ["owner answered"]
    [request] = fake_llm.chat_requests()
    assert "let me in" not in str(request["messages"])
    assert not sessions_holding(runtime, "let me in")


async def test_a_room_message_is_answered_only_on_mention(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """In a room of three, a message without a mention is left alone; a mention is answered, in
    reply to it."""
    fake_llm.push(text("here I am"))
    async with matrix_bot(synapse, runtime, streaming="off") as world:
        room = await room_with(world.owner, world.stranger, bot=world.me)
        await joined(world.owner, room, world.me)
        await world.owner.send(room, "just chatting among ourselves")
        asked = await world.owner.send(
            room, f"{world.me}: are you there?", **{"m.mentions": {"user_ids": [world.me]}}
        )
        await world.answered(room)
    [reply] = world.owner.posts(room, world.me)
    assert reply["content"]["body"] == "here I am"
    assert reply["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == asked
    [request] = fake_llm.chat_requests()
    assert "are you there?" in str(request["messages"][-1]["content"])
    assert "just chatting" not in str(request["messages"])


async def test_a_thread_keeps_its_own_session(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A mention in a thread is answered in the thread, in a session apart from the room's."""
    fake_llm.push(text("room answer"))
    fake_llm.push(text("thread answer"))
    async with matrix_bot(synapse, runtime, streaming="off") as world:
        room = await room_with(world.owner, world.stranger, bot=world.me)
        await joined(world.owner, room, world.me)
        mention = {"m.mentions": {"user_ids": [world.me]}}
        root = await world.owner.send(room, f"{world.me}: the room's question", **mention)
        await world.answered(room)
        in_thread = {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": root},
        }
        await world.owner.send(
            room, f"{world.me}: the thread's question", **mention, **{"m.relates_to": in_thread}
        )
        await world.answered(room, 2)
    first, second = world.owner.posts(room, world.me)
    assert first["content"]["body"] == "room answer"
    assert second["content"]["body"] == "thread answer"
    assert second["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert second["content"]["m.relates_to"]["event_id"] == root
    _, thread_request = fake_llm.chat_requests()
    assert "the room's question" not in str(thread_request["messages"])
    assert len(sessions_holding(runtime, "question")) == 2
    assert sessions_holding(runtime, "the thread's question") != sessions_holding(
        runtime, "the room's question"
    )


async def test_a_long_answer_is_streamed_by_edits_and_ends_as_written(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A slow long answer shows in one message edited (m.replace) as it grows; the last edit is
    the whole answer, formatted."""
    answer = " ".join(f"word{n}" for n in range(150)) + "\n\n**the end**"
    fake_llm.push(streamed(answer, rate=100))  # about 3 s
    async with matrix_bot(synapse, runtime) as world:
        room = await world.dm()
        await world.owner.send(room, "tell me a long story")

        def finished() -> bool:
            posts = world.owner.posts(room, world.me)
            return (
                bool(posts)
                and world.owner.shown_text(room, world.me, posts[0]["event_id"]) == answer
            )

        await world.owner.wait_for(finished, within=60, what="the whole answer")
    [post] = world.owner.posts(room, world.me)
    edits = [m for m in world.owner.messages(room, world.me) if m is not post]
    assert len(edits) >= 2  # shown while written, then finished
    assert all(e["content"]["m.relates_to"]["event_id"] == post["event_id"] for e in edits)
    assert len(post["content"]["body"]) < len(answer)
    final = edits[-1]["content"]["m.new_content"]
    assert final["body"] == answer
    assert "<strong>the end</strong>" in final["formatted_body"]


async def upload(who: Person, data: bytes, content_type: str, filename: str) -> str:
    """The mxc:// URL of a file `who` puts in the homeserver's media repository."""
    response, _ = await who.client.upload(
        io.BytesIO(data), content_type, filename, filesize=len(data)
    )
    assert isinstance(response, nio.UploadResponse), response
    return str(response.content_uri)


async def test_an_image_and_a_pdf_reach_the_model_through_the_media_reader(
    synapse: Synapse, make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A captioned m.image is downloaded from the homeserver into the room's media folder and
    given to the model as one image part; an m.file PDF reaches it as its text, named."""
    pages = ["Chapter 1. The tide tables for Porto.", "Chapter 2. Where the boats moor."]
    async with make_runtime() as runtime, matrix_bot(synapse, runtime, streaming="off") as world:
        room = await world.dm()
        photo = jpeg(800, 600)
        url = await upload(world.owner, photo, "image/jpeg", "cat.jpg")
        await world.owner.send(
            room, "is this my cat?", msgtype="m.image", url=url, filename="cat.jpg"
        )
        await world.answered(room)
        url = await upload(world.owner, pdf(pages), "application/pdf", "tides.pdf")
        await world.owner.send(room, "tides.pdf", msgtype="m.file", url=url)
        await world.answered(room, 2)
        [kept_photo, _, kept_pdf, _] = (await runtime.sessions.get(f"matrix:{room}")).messages
    folder = media_folder("matrix", room) + "/"
    first, second = fake_llm.chat_requests()
    assert len(image_parts(first)) == 1
    caption, _, named = str(kept_photo["content"]).partition("\n")
    assert caption == "is this my cat?" and named.startswith(f"[image: {folder}")
    saved = named.removeprefix("[image: ").removesuffix("]")
    assert saved.endswith("-cat.jpg")
    assert (runtime.config.workspace / saved).read_bytes() == photo
    asked = last_user_text(second)
    assert "Chapter 1. The tide tables for Porto." in asked and "Chapter 2." in asked
    assert str(kept_pdf["content"]).startswith(f"[file: {folder}")


async def test_a_file_over_the_size_cap_is_named_not_downloaded(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A file bigger than the cap is not saved; the model is told it was sent and not read."""
    async with matrix_bot(synapse, runtime, max_media_bytes=1024, streaming="off") as world:
        room = await world.dm()
        url = await upload(world.owner, b"x" * 4096, "text/plain", "big.txt")
        await world.owner.send(room, "big.txt", msgtype="m.file", url=url)
        await world.answered(room)
    assert last_user_text(fake_llm.chat_requests()[0]).endswith("[file: big.txt (not downloaded)]")
    assert not (runtime.config.workspace / "media" / "matrix").exists()


async def test_an_encrypted_room_is_told_once_that_the_bot_cannot_read_it(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """Encrypted messages get one notice per room (and a log line), never a silent drop."""
    fake_llm.push(text("plain answer"))
    ciphertext = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg",
        "device_id": "OWNERDEVICE",
        "sender_key": "IlRMeOPX2e0MurIyfWEucYBRVOEEUMrOHqn/8mLqMjA",
        "session_id": "X3lUlvLELLYxeTx4yOVu6UDpasGEVO0Jbu+QFnm0cKQ",
    }
    async with matrix_bot(synapse, runtime, streaming="off") as world:
        room = await room_with(world.owner, bot=world.me, encrypted=True)
        await joined(world.owner, room, world.me)
        for _ in range(2):
            sent = await world.owner.client.room_send(room, "m.room.encrypted", ciphertext)
            assert sent.event_id
        await world.answered(room)
        await world.owner.send(room, "and a plain one")
        await world.answered(room, 2)
    notice, answer = world.owner.posts(room, world.me)
    assert notice["content"]["body"] == ENCRYPTED_NOTICE
    assert answer["content"]["body"] == "plain answer"


async def test_a_rate_limit_is_waited_out_for_the_homeservers_retry_after(
    synapse: Synapse, runtime: Runtime, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """With the bot limited to a message a second, four quick answers all arrive: each
    M_LIMIT_EXCEEDED is waited out for its retry_after_ms, none is dropped."""
    async with matrix_bot(synapse, runtime, streaming="off") as world:
        synapse.limit_messages(world.me, per_second=1, burst=1)
        room = await world.dm()
        for n in range(4):
            await world.owner.send(room, f"quick {n}")
        await world.answered(room, 4)
    bodies = sorted(m["content"]["body"] for m in world.owner.posts(room, world.me))
    assert bodies == [f"echo: quick {n}" for n in range(4)]
    assert "ratelimited" in caplog.text


async def test_the_owner_forgets_by_typing_the_command_offered(
    synapse: Synapse, runtime: Runtime
) -> None:
    """Matrix shows no buttons: /forget's listing ends with the commands to type, and typing the
    one offered removes the line."""
    cat = "- The user's cat is called Miso."
    runtime.memory.write_memory(runtime.memory.read_memory() + f"{cat}\n")
    async with matrix_bot(synapse, runtime) as world:
        room = await world.dm()
        await world.owner.send(room, "/forget miso")
        await world.answered(room)
        [listing] = [p["content"]["body"] for p in world.owner.posts(room, world.me)]
        assert cat in listing and listing.endswith("\n\nReply /forget yes or /forget no.")
        await world.owner.send(room, "/forget yes")
        await world.answered(room, 2)
    assert "1 line removed" in world.owner.posts(room, world.me)[1]["content"]["body"]
    assert "Miso" not in runtime.memory.read_memory()


class AsksWhileStreaming:
    """A handler that streams a first part and, once it shows, answers with a question and
    its buttons."""

    def __init__(self) -> None:
        self.shown = asyncio.Event()

    async def __call__(
        self, message: InboundMessage, stream: ReplyStream | None = None
    ) -> OutboundMessage:
        assert stream is not None
        await stream.write("Let me look. " * 20)
        await self.shown.wait()
        choice = (Button("Approve", "/approve 3f2a"), Button("Deny", "/deny 3f2a"))
        return OutboundMessage(message.channel, message.chat_id, "Run this?", buttons=choice)


async def test_a_streamed_reply_ends_with_its_buttons_commands(
    synapse: Synapse, runtime: Runtime
) -> None:
    """A reply shown while written that ends offering buttons is edited, in its message, to the
    question followed by the commands to type."""
    handler = AsksWhileStreaming()
    async with matrix_bot(synapse, runtime, handler) as world:
        room = await world.dm()
        await world.owner.send(room, "anything to run?")
        await world.answered(room)
        handler.shown.set()
        [post] = world.owner.posts(room, world.me)

        def shown() -> str:
            return world.owner.shown_text(room, world.me, post["event_id"])

        await world.owner.wait_for(lambda: shown().startswith("Run this?"), what="the question")
    assert shown() == "Run this?\n\nReply /approve 3f2a or /deny 3f2a."
    assert len(world.owner.posts(room, world.me)) == 1


@needs_bwrap
async def test_an_exec_approval_names_the_command_to_type(
    synapse: Synapse, make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """exec's request in the owner's DM (the turn streaming meanwhile) ends with
    `/approve ID or /deny ID`; the owner typing that /approve runs the command."""
    prepare_workspace(tmp_path)
    tools = {"exec": {"enabled": True, "timeout": 20, "approve_timeout": 30}}
    fake_llm.push(tool_call("exec", {"command": "touch approved.txt"}))
    fake_llm.push(text("done"), match=lambda body: bool(tool_results(body)))
    async with make_runtime({"tools": tools}) as runtime, matrix_bot(synapse, runtime) as world:
        assert runtime.agent.tools.approvals is not None
        runtime.agent.tools.approvals.notify = chat_sender([world.channel])
        room = await world.dm()
        await world.owner.send(room, "run it")

        def bodies() -> list[str]:
            return [p["content"]["body"] for p in world.owner.posts(room, world.me)]

        await world.owner.wait_for(
            lambda: any("Run this command?" in b for b in bodies()), what="the request"
        )
        [request] = [b for b in bodies() if "Run this command?" in b]
        found = re.search(r"Reply (/approve \w+) or /deny \w+\.$", request)
        assert found is not None, request
        await world.owner.send(room, found.group(1))
        await world.owner.wait_for(
            lambda: "Approved: running it." in bodies(), within=30, what="the answer"
        )
        assert (runtime.config.workspace / "approved.txt").exists()
