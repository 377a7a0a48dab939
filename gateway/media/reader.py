"""What the model gets of the files a message carries: transcripts, images, document text.

The channels save each attachment under `media/<channel>/<chat>/` and name it in the message text
(`[voice: media/telegram/42/V1.oga]`). Before a turn, `MediaReader.prepare` replaces each such note
with what can be understood of the file: a voice note's transcript (marked with its duration), a
document's text (cut to `media.max_document_chars` and to its share of the prompt budget), and for
images a data URL the current turn alone sends. The session keeps only text: paths, captions,
transcripts, extracted text; never pixels or base64.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gateway.bus import InboundMessage
from gateway.config.models import MediaConfig
from gateway.errors import TranscriptionError
from gateway.llm.types import VisionSupport
from gateway.media.audio import audio_seconds, format_duration
from gateway.media.documents import READABLE_SUFFIXES, DocumentReadError, document_text
from gateway.media.images import ImageReadError, image_data_url
from gateway.units import format_size
from memory.budget import Part, PromptBudget

log = logging.getLogger(__name__)

AUDIO_SUFFIXES = frozenset({".oga", ".ogg", ".opus", ".mp3", ".m4a", ".wav", ".webm", ".flac"})
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".gif"})
# The documents of one message together take at most this share of the prompt budget.
DOCUMENT_SHARE = 0.25
# A note as the channels write it: one line, `[kind: path]`.
_NOTE = re.compile(r"^\[\w+: [^\]\n]*\]$", re.MULTILINE)


class Transcriber(Protocol):
    """Speech to text (the OpenAI-SDK client in gateway/llm/provider.py)."""

    async def transcribe(self, filename: str, data: bytes) -> str: ...


@dataclass(frozen=True, slots=True)
class PreparedMessage:
    """One inbound message made ready for the model."""

    text: str  # what the session stores and the model reads
    images: tuple[str, ...] = ()  # data URLs, for the current turn only
    notices: tuple[str, ...] = ()  # what the person is told (a failed transcription, a refusal)
    answerable: bool = True  # False: nothing for the model (only files we could not read)


@dataclass(frozen=True, slots=True)
class _Read:
    note: str  # replaces the channel's note in the text
    image: str = ""
    notice: str = ""
    understood: bool = True


class MediaReader:
    """Turns the attachments of a message into text (and images) for one turn."""

    def __init__(
        self,
        workspace: Path,
        settings: MediaConfig,
        budget: PromptBudget,
        vision: VisionSupport,
        transcriber: Transcriber | None = None,
    ) -> None:
        self.workspace = workspace
        self.settings = settings
        self.budget = budget
        self.vision = vision
        self.transcriber = transcriber

    async def prepare(self, message: InboundMessage) -> PreparedMessage:
        """The message's text with each attachment note replaced by what was read of the file."""
        if not message.media:
            return PreparedMessage(message.text)
        text = message.text
        images: list[str] = []
        notices: list[str] = []
        understood = bool(_NOTE.sub("", text).strip())  # the person's own words
        for relative in message.media:
            note = _note_for(text, relative)
            kind = note[1 : note.index(":")] if note else "file"
            read = await self._read(relative, kind)
            text = text.replace(note, read.note, 1) if note else f"{text}\n{read.note}".strip()
            if read.image:
                images.append(read.image)
            if read.notice:
                notices.append(read.notice)
            understood = understood or read.understood
        # Nothing understood and something to say about it: the notice is the whole answer.
        return PreparedMessage(text, tuple(images), tuple(notices), understood or not notices)

    async def _read(self, relative: str, kind: str) -> _Read:
        path = self._inside_media(relative)
        if path is None:
            return _Read(f"[{kind}: {relative}]")
        suffix = path.suffix.lower()
        try:
            size = path.stat().st_size
        except OSError:
            return _Read(f"[{kind}: {relative}, missing]", understood=False)
        if kind in ("voice", "audio") or suffix in AUDIO_SUFFIXES:
            return await self._audio(path, relative, kind, size)
        if suffix in IMAGE_SUFFIXES or kind == "image":
            return await self._image(path, relative, size)
        if suffix in READABLE_SUFFIXES:
            return await self._document(path, relative, size)
        return _Read(f"[{kind}: {relative}]")

    def _inside_media(self, relative: str) -> Path | None:
        """The file, if it really lies under the workspace's media/ (resolved, links followed)."""
        media = (self.workspace / "media").resolve()
        path = (self.workspace / relative).resolve()
        if not path.is_relative_to(media) or not path.is_file():
            log.warning("attachment outside media/ ignored path=%s", relative)
            return None
        return path

    # -- voice and audio ---------------------------------------------------------------------------
    async def _audio(self, path: Path, relative: str, kind: str, size: int) -> _Read:
        seconds = await asyncio.to_thread(audio_seconds, path)
        label = (
            "voice note" if kind == "voice" or path.suffix.lower() in {".oga", ".opus"} else kind
        )
        if kind == "audio" and "voice-message" in path.name:  # Discord's voice messages
            label = "voice note"
        length = f", {format_duration(seconds)}" if seconds is not None else ""
        if self.transcriber is None:  # llm.transcription: null
            return _Read(f"[{label}{length}: {relative}]")
        cap = self.settings.max_audio_bytes
        if size > cap:
            return _Read(
                f"[{label}{length}: {relative}, not transcribed: over {_mb(cap)}]",
                notice=f"Your {label} is larger than the {_mb(cap)} I transcribe; it is saved, "
                "but I did not listen to it.",
                understood=False,
            )
        try:
            data = await asyncio.to_thread(path.read_bytes)
            transcript = await self.transcriber.transcribe(path.name, data)
        except (TranscriptionError, OSError) as exc:
            log.warning("transcription failed path=%s error=%s", relative, exc)
            return _Read(
                f"[{label}{length}: {relative}, not transcribed: {exc}]",
                notice=f"I could not transcribe your {label} ({exc}). It is saved; please send "
                "it again or type it.",
                understood=False,
            )
        if not transcript:
            return _Read(f"[{label}{length}: {relative}, no speech recognised]")
        return _Read(f"[{label}{length}, transcribed from {relative}]\n{transcript}")

    # -- images ------------------------------------------------------------------------------------
    async def _image(self, path: Path, relative: str, size: int) -> _Read:
        note = f"[image: {relative}]"
        if not self.vision.enabled:
            return _Read(note)
        cap = self.settings.max_image_bytes
        if size > cap:
            return _Read(
                f"[image: {relative}, not shown to the model: over {_mb(cap)}]",
                notice=f"Your image is larger than the {_mb(cap)} I look at; it is saved, but I "
                "did not see it.",
                understood=False,
            )
        try:
            url, _ = await asyncio.to_thread(image_data_url, path, self.settings.max_image_side)
        except ImageReadError as exc:
            log.warning("image not readable path=%s error=%s", relative, exc)
            return _Read(note)
        return _Read(note, image=url)

    # -- documents ---------------------------------------------------------------------------------
    async def _document(self, path: Path, relative: str, size: int) -> _Read:
        cap = self.settings.max_document_bytes
        if size > cap:
            return _Read(
                f"[file: {relative}, not read: over {_mb(cap)}]",
                notice=f"Your file is larger than the {_mb(cap)} I read; it is saved, but I did "
                "not read it.",
            )
        limit = self.settings.max_document_chars
        try:
            text, total = await asyncio.to_thread(document_text, path, limit)
        except (DocumentReadError, OSError) as exc:
            log.warning("document not readable path=%s error=%s", relative, exc)
            return _Read(f"[file: {relative}, could not be read: {exc}]")
        if total > len(text):
            text += f"\n[... memgate cut {path.name} at {limit} characters of {total}]"
        share = int(self.budget.limit * DOCUMENT_SHARE)
        part = await asyncio.to_thread(self.budget.cap_text, Part(path.name, text), share)
        return _Read(
            f"[file: {relative}, its text follows]\n"
            f"--- {path.name} ---\n{part.text.strip()}\n--- end of {path.name} ---"
        )


def _note_for(text: str, relative: str) -> str:
    """The channel's note naming this file (`[kind: path]`), or "" if the text has none."""
    found = re.search(rf"\[\w+: {re.escape(relative)}\]", text)
    return found.group(0) if found else ""


def _mb(size: int) -> str:
    return format_size(size).replace(".0 ", " ")
