"""Voice messages, images and PDFs from Discord, understood through the real agent.

The real discord.py against the fake Discord (attachments downloaded from its loopback CDN), the
real openai SDK against the fake LLM, and real files made by tests/samples.py.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

from PIL import Image

from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory
from tests.fakes import discord_api as fd
from tests.fakes.discord_api import ALICE, DM, FakeDiscord, serving
from tests.fakes.llm import FakeLLM, error, image_parts, last_user_text
from tests.samples import jpeg, ogg_opus, pdf


async def send_attachment(
    fake: FakeDiscord, filename: str, data: bytes, content_type: str, content: str = ""
) -> str:
    """Post a DM from Alice with one attachment; the path memgate saves it under."""
    url = fake.add_file(filename, data)
    item = fd.attachment(url, filename, len(data), content_type)
    sent = await fake.send_message(DM, ALICE, content, attachments=[item])
    return f"media/discord/{DM}/{sent['id']}-{item['id']}-{filename}"


async def replies(fake: FakeDiscord, count: int) -> list[str]:
    await fake.wait_for(lambda: len(fake.sent(DM)) >= count)
    return [m["content"] for m in fake.sent(DM)]


async def test_voice_message_transcript_is_the_user_text(
    fake_discord: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A Discord voice message is transcribed; the transcript is stored and answered."""
    data = ogg_opus(12.4)
    async with serving(fake_discord, runtime.agent.handle, runtime.config.workspace):
        path = await send_attachment(fake_discord, "voice-message.ogg", data, "audio/ogg")
        [reply] = await replies(fake_discord, 1)
    [upload] = fake_llm.transcriptions
    assert upload["file"] == data
    stored = (await runtime.sessions.get(f"discord:{DM}")).messages[0]["content"]
    assert stored == f"[voice note, 0:12, transcribed from {path}]\nhello from a voice note"
    assert last_user_text(fake_llm.chat_requests()[0]) == stored
    assert reply == f"echo: {stored}"


async def test_failed_transcription_is_told_and_kept(
    fake_discord: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A transcription error on Discord: the user is told, the message and the file are kept."""
    fake_llm.transcripts.append(error(503, "overloaded"))
    async with serving(fake_discord, runtime.agent.handle, runtime.config.workspace):
        path = await send_attachment(fake_discord, "voice-message.ogg", ogg_opus(2), "audio/ogg")
        [reply] = await replies(fake_discord, 1)
    assert "could not transcribe your voice note" in reply and "overloaded" in reply
    [kept] = (await runtime.sessions.get(f"discord:{DM}")).messages
    assert kept["content"].startswith(f"[voice note, 0:02: {path}, not transcribed")
    assert (runtime.config.workspace / path).exists()


async def test_image_goes_as_one_image_part_once(
    fake_discord: FakeDiscord, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """An image with a caption is one downscaled image part; history replays it as its path."""
    async with serving(fake_discord, runtime.agent.handle, runtime.config.workspace):
        path = await send_attachment(
            fake_discord, "cat.jpg", jpeg(2400, 3200), "image/jpeg", "is this my cat?"
        )
        await replies(fake_discord, 1)
        await fake_discord.send_message(DM, ALICE, "what colour is it?")
        await replies(fake_discord, 2)
    first, second = fake_llm.chat_requests()
    [url] = image_parts(first)
    with Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))) as image:
        assert image.size == (1176, 1568)
    assert image_parts(second) == []
    assert second["messages"][1]["content"] == f"is this my cat?\n[image: {path}]"
    session_file = runtime.sessions.path_for(f"discord:{DM}").read_text()
    assert path in session_file and "base64" not in session_file


async def test_pdf_text_reaches_the_model_cut_to_the_cap(
    fake_discord: FakeDiscord, make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A 3-page PDF sent on Discord reaches the model as text with its name, cut with a marker."""
    pages = [f"Chapter {n}. " + " ".join(f"term{n}y{i}" for i in range(40)) for n in (1, 2, 3)]
    async with (
        make_runtime({"media": {"max_document_chars": 600}}) as runtime,
        serving(fake_discord, runtime.agent.handle, runtime.config.workspace),
    ):
        path = await send_attachment(fake_discord, "notes.pdf", pdf(pages), "application/pdf")
        await replies(fake_discord, 1)
    asked = last_user_text(fake_llm.chat_requests()[0])
    name = Path(path).name
    assert f"--- {name} ---" in asked and "Chapter 1. term1y0" in asked
    assert "Chapter 3" not in asked
    assert f"[... memgate cut {name} at 600 characters" in asked
