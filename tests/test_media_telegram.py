"""Voice notes, photos and documents from Telegram, understood through the real agent.

The real python-telegram-bot against the fake Bot API, the real openai SDK against the fake LLM
(which transcribes uploads and records image parts), and real files made by tests/samples.py.
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from PIL import Image

from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory
from tests.fakes.llm import FakeLLM, error, image_parts, last_user_text
from tests.fakes.telegram_api import FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running
from tests.samples import jpeg, ogg_opus, pdf


@pytest.fixture
async def chat(
    fake_telegram: FakeTelegram, tmp_path: Path, runtime: Runtime
) -> AsyncIterator[FakeTelegram]:
    """The Telegram channel running in front of the real agent (default settings)."""
    async with running(agent_channel(fake_telegram, runtime)):
        yield fake_telegram


def send_voice(fake: FakeTelegram, seconds: float = 7.0) -> bytes:
    data = ogg_opus(seconds)
    voice = fake.add_file(data, file_id="v", unique_id="V1", path="voice/file_1.oga")
    fake.message(None, voice={**voice, "duration": round(seconds), "mime_type": "audio/ogg"})
    return data


def send_photo(fake: FakeTelegram, caption: str, unique_id: str = "P1") -> None:
    photo = fake.add_file(
        jpeg(3000, 2000), file_id=unique_id, unique_id=unique_id, path="photos/p.jpg"
    )
    fake.message(None, caption=caption, photo=[{**photo, "width": 3000, "height": 2000}])


async def test_voice_note_transcript_is_the_user_text(
    chat: FakeTelegram, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A voice note is transcribed; the transcript is the stored user text and the reply uses it."""
    data = send_voice(chat, 7.0)
    [sent] = await chat.wait_sent(1)
    [upload] = fake_llm.transcriptions
    assert upload["model"] == "whisper-1" and upload["file"] == data
    assert upload["filename"] == "V1.oga"
    session = await runtime.sessions.get("telegram:42")
    stored = session.messages[0]["content"]
    assert stored == (
        "[voice note, 0:07, transcribed from media/telegram/42/V1.oga]\nhello from a voice note"
    )
    assert last_user_text(fake_llm.chat_requests()[0]) == stored
    assert sent["text"] == f"echo: {stored}"
    assert (runtime.config.workspace / "media/telegram/42/V1.oga").read_bytes() == data


async def test_failed_transcription_keeps_the_message_and_tells_the_user(
    chat: FakeTelegram, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """The transcriber answers 500: the message is stored with a note, the user is told why."""
    fake_llm.transcripts.append(error(500, "speech model down"))
    send_voice(chat, 3.0)
    [sent] = await chat.wait_sent(1)
    assert "could not transcribe your voice note" in sent["text"]
    assert "speech model down" in sent["text"]
    assert fake_llm.chat_requests() == []  # nothing the model could answer
    session = await runtime.sessions.get("telegram:42")
    [kept] = session.messages
    assert kept["content"].startswith(
        "[voice note, 0:03: media/telegram/42/V1.oga, not transcribed"
    )
    assert (runtime.config.workspace / "media/telegram/42/V1.oga").exists()


async def test_photo_goes_as_one_image_part_once(
    chat: FakeTelegram, runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A captioned photo is one downscaled image part; the session keeps path and caption only."""
    send_photo(chat, "what is this?")
    await chat.wait_sent(1)
    [url] = image_parts(fake_llm.chat_requests()[0])
    assert url.startswith("data:image/jpeg;base64,")
    with Image.open(io.BytesIO(base64.b64decode(url.partition(",")[2]))) as image:
        assert max(image.size) == runtime.config.media.max_image_side
    chat.message("and its colour?")
    await chat.wait_sent(2)
    later = fake_llm.chat_requests()[1]
    assert image_parts(later) == []
    history = [m["content"] for m in later["messages"][1:-1]]
    assert history[0] == "[image: media/telegram/42/P1.jpg]\nwhat is this?"  # a reference
    session_file = runtime.sessions.path_for("telegram:42").read_text()
    assert "media/telegram/42/P1.jpg" in session_file and "what is this?" in session_file
    assert "base64" not in session_file and len(session_file) < 2000


async def test_refused_vision_answers_without_the_image_and_stops_sending_images(
    chat: FakeTelegram, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """The endpoint refuses image parts: answered without it, one warning, later photos skip it."""
    fake_llm.vision_unsupported = True
    with caplog.at_level(logging.WARNING, logger="gateway.llm.provider"):
        send_photo(chat, "first", "P1")
        [first] = await chat.wait_sent(1)
        send_photo(chat, "second", "P2")
        await chat.wait_sent(2)
    assert first["text"].startswith("echo: [image: media/telegram/42/P1.jpg]")
    requests = fake_llm.chat_requests()
    assert [len(image_parts(r)) for r in requests] == [1, 0, 0]  # refused, retried, next turn
    warnings = [r for r in caplog.records if "does not accept images" in r.getMessage()]
    assert len(warnings) == 1


async def test_pdf_text_reaches_the_model_cut_to_the_cap(
    fake_telegram: FakeTelegram, tmp_path: Path, make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A 3-page PDF's text is given with its name, cut at media.max_document_chars with a marker."""
    pages = [f"Page {n} says: " + " ".join(f"word{n}x{i}" for i in range(40)) for n in (1, 2, 3)]
    data = pdf(pages)
    async with make_runtime({"media": {"max_document_chars": 700}}) as runtime:
        async with running(agent_channel(fake_telegram, runtime)):
            doc = fake_telegram.add_file(data, file_id="d", unique_id="D1", path="documents/f")
            fake_telegram.message(
                None, caption="summarise", document={**doc, "file_name": "report.pdf"}
            )
            await fake_telegram.wait_sent(1)
        asked = last_user_text(fake_llm.chat_requests()[0])
        stored = (await runtime.sessions.get("telegram:42")).messages[0]["content"]
    assert "--- D1-report.pdf ---" in asked and "summarise" in asked
    assert "Page 1 says: word1x0" in asked and "word2x0" in asked
    assert "Page 3 says" not in asked and "word2x39" not in asked
    assert "[... memgate cut D1-report.pdf at 700 characters" in asked
    assert stored in asked  # the session keeps the same text
