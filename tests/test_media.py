"""What the agent makes of attachments: limits, switches and boundaries, through the real runtime.

Files are written where a channel saves them (media/<channel>/<chat>/) and named in the message as
a channel names them; the agent runs against the fake LLM.
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

from gateway.bus import InboundMessage
from gateway.media.audio import audio_seconds, format_duration
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, consolidation_prompt, image_parts, last_user_text, text
from tests.samples import jpeg, ogg_opus, pdf


def attach(workspace: Path, name: str, data: bytes, kind: str, text: str = "") -> InboundMessage:
    """Save a file as the test channel would, and the message that names it."""
    relative = f"media/test/42/{name}"
    (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
    (workspace / relative).write_bytes(data)
    body = "\n".join(filter(None, [f"[{kind}: {relative}]", text]))
    return inbound(body, media=(relative,), message_id=name)


async def test_oversized_image_is_refused_with_a_clear_reply(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """An image over media.max_image_bytes is not sent; the reply names the limit."""
    async with make_runtime({"media": {"max_image_bytes": 1000}}) as runtime:
        message = attach(runtime.config.workspace, "big.jpg", jpeg(400, 400), "image", "look")
        reply = await runtime.agent.handle(message)
    assert reply is not None
    assert reply.text.startswith("Your image is larger than the 1000 B I look at; it is saved")
    [request] = fake_llm.chat_requests()
    assert image_parts(request) == [] and "not shown to the model" in last_user_text(request)


async def test_oversized_audio_is_not_transcribed(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Audio over media.max_audio_bytes never reaches the transcriber; the person is told."""
    async with make_runtime({"media": {"max_audio_bytes": 10}}) as runtime:
        message = attach(runtime.config.workspace, "V.oga", ogg_opus(4), "voice")
        reply = await runtime.agent.handle(message)
    assert fake_llm.transcriptions == [] and fake_llm.chat_requests() == []
    assert reply is not None and "did not listen to it" in reply.text


async def test_transcription_null_names_the_audio(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """llm.transcription: null: no upload; the model is told a voice note of that length arrived."""
    async with make_runtime({"llm": {"transcription": None}}) as runtime:
        await runtime.agent.handle(attach(runtime.config.workspace, "V.oga", ogg_opus(65), "voice"))
    assert fake_llm.transcriptions == []
    assert last_user_text(fake_llm.chat_requests()[0]) == "[voice note, 1:05: media/test/42/V.oga]"


async def test_transcription_endpoint_and_key_of_its_own(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """llm.transcription's base_url, api_key and model are the ones the upload uses."""
    settings = {"base_url": fake_llm.url, "api_key": "sk-speech-key-123456", "model": "tiny"}
    async with make_runtime({"llm": {"transcription": settings}}) as runtime:
        await runtime.agent.handle(attach(runtime.config.workspace, "V.oga", ogg_opus(1), "voice"))
    [upload] = fake_llm.transcriptions
    assert upload["model"] == "tiny"
    assert upload["_headers"]["authorization"] == "Bearer sk-speech-key-123456"


async def test_vision_switch(make_runtime: RuntimeFactory, fake_llm: FakeLLM) -> None:
    """false sends no image; auto guesses from the model name; true sends to any model."""
    cases = [
        ({"model": "gpt-4o-mini", "vision": False}, 0),
        ({"model": "llama3.1:8b"}, 0),
        ({"model": "qwen2.5vl:7b"}, 1),
        ({"model": "llama3.1:8b", "vision": True}, 1),
    ]
    for index, (llm, expected) in enumerate(cases):
        async with make_runtime({"llm": llm}) as runtime:
            message = attach(runtime.config.workspace, f"p{index}.jpg", jpeg(50, 50), "image")
            await runtime.agent.handle(message)
        assert len(image_parts(fake_llm.chat_requests()[-1])) == expected, llm


async def test_text_document_is_given_with_its_name(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A .csv file's text reaches the model between markers naming the file."""
    csv = b"name,cups\nalice,3\nbob,1\n"
    async with make_runtime() as runtime:
        message = attach(runtime.config.workspace, "tea.csv", csv, "file", "who drinks most?")
        await runtime.agent.handle(message)
    asked = last_user_text(fake_llm.chat_requests()[0])
    assert "--- tea.csv ---\nname,cups\nalice,3\nbob,1\n--- end of tea.csv ---" in asked


async def test_pdf_without_text_is_named_with_the_reason(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A PDF with no text layer (a scan) is named with the reason; the caption is still answered."""
    async with make_runtime() as runtime:
        message = attach(runtime.config.workspace, "scan.pdf", pdf(["", ""]), "file", "read it")
        reply = await runtime.agent.handle(message)
    assert reply is not None and not reply.failed
    asked = last_user_text(fake_llm.chat_requests()[0])
    assert asked == (
        "[file: media/test/42/scan.pdf, could not be read: the PDF has no text layer (a scan?)]"
        "\nread it"
    )


async def test_a_pdf_within_the_cap_is_given_whole_without_a_cut_marker(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A PDF whose pages fit media.max_document_chars reaches the model whole, with no marker."""
    pages = ["First page text.", "Second page text."]
    async with make_runtime() as runtime:
        message = attach(runtime.config.workspace, "two.pdf", pdf(pages), "file", "read it")
        await runtime.agent.handle(message)
    asked = last_user_text(fake_llm.chat_requests()[0])
    assert "[page 1]\nFirst page text.\n\n[page 2]\nSecond page text.\n--- end of two.pdf" in asked
    assert "memgate cut" not in asked


async def test_document_is_cut_to_its_share_of_the_budget(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A document under the character cap but over a quarter of the prompt budget is cut there."""
    text = " ".join(f"entry{i}" for i in range(5000)).encode()
    small = {"llm": {"context_window": 4096, "max_tokens": 512}}
    async with make_runtime(small) as runtime:
        message = attach(runtime.config.workspace, "log.txt", text, "file")
        reply = await runtime.agent.handle(message)
        budget = runtime.config.llm.budget
        asked = last_user_text(fake_llm.chat_requests()[0])
        tokens = runtime.counter.count(asked)
    assert reply is not None and not reply.failed
    assert "memgate cut log.txt here to fit the model's context" in asked
    assert tokens <= budget // 4 + 200  # the share, plus the markers and the file line


async def test_a_path_outside_media_is_not_read(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A media path that leaves media/ (here MEMORY.md) is named, never read into the prompt."""
    async with make_runtime() as runtime:
        runtime.memory.memory_md.write_text("# Long-term Memory\nsecret fact\n")
        message = inbound("[file: memory/MEMORY.md]", media=("memory/MEMORY.md",))
        await runtime.agent.handle(message)
    [request] = fake_llm.chat_requests()
    assert last_user_text(request) == "[file: memory/MEMORY.md]"


async def test_consolidation_sees_transcripts_and_captions_not_files(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """After /new the consolidation prompt has the transcript and the caption, no image data."""
    fake_llm.transcripts.append(text("buy oat milk on the way home"))
    async with make_runtime() as runtime:
        workspace = runtime.config.workspace
        voice = attach(workspace, "V.oga", ogg_opus(3), "voice")
        photo = attach(workspace, "p.jpg", jpeg(300, 200), "image", "my desk")
        for message in (voice, photo):
            reply = await runtime.agent.handle(message)
            assert reply is not None and reply.on_sent is not None
            await reply.on_sent()  # delivered, as a channel reports it: /new need not wait
        await runtime.agent.handle(inbound("/new"))
        await runtime.consolidator.wait_idle()
    [request] = fake_llm.consolidation_requests()
    prompt = consolidation_prompt(request)
    assert "buy oat milk on the way home" in prompt and "my desk" in prompt
    assert "base64" not in json.dumps(request) and image_parts(request) == []


def test_durations_of_ogg_and_wav(tmp_path: Path) -> None:
    """Ogg Opus and WAV durations are read from their headers; other bytes give None."""
    (tmp_path / "v.oga").write_bytes(ogg_opus(7.25))
    with wave.open(str(tmp_path / "a.wav"), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16_000)
        out.writeframes(b"\x00\x00" * 16_000 * 3)
    (tmp_path / "x.mp3").write_bytes(b"ID3 not parsed")
    assert audio_seconds(tmp_path / "v.oga") == 7.25
    assert audio_seconds(tmp_path / "a.wav") == 3.0
    assert audio_seconds(tmp_path / "x.mp3") is None
    assert [format_duration(s) for s in (7.25, 65, 3725)] == ["0:07", "1:05", "1:02:05"]
