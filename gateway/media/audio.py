"""How long a recording lasts, read from its headers: Ogg (Opus, Vorbis) and WAV.

Telegram and Discord voice notes are Ogg Opus; the figure marks a transcript as "voice note, 0:07".
Imports nothing of ours; other formats answer None rather than guess.
"""

from __future__ import annotations

import wave
from pathlib import Path

_TAIL = 65_536  # the last Ogg page lies within this many bytes of the end


def audio_seconds(path: Path) -> float | None:
    """Duration in seconds, or None if the format is not one we read or the file is damaged."""
    try:
        with path.open("rb") as file:
            head = file.read(4096)
            if head.startswith(b"OggS"):
                file.seek(0, 2)
                size = file.tell()
                file.seek(max(0, size - _TAIL))
                return _ogg_seconds(head, file.read())
        if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
            with wave.open(str(path), "rb") as recording:
                return recording.getnframes() / recording.getframerate()
    except (OSError, EOFError, wave.Error, ZeroDivisionError):
        return None
    return None


def _ogg_seconds(head: bytes, tail: bytes) -> float | None:
    """The last page's granule position over the stream's sample rate."""
    last = tail.rfind(b"OggS")
    if last < 0 or len(tail) < last + 14:
        return None
    granule = int.from_bytes(tail[last + 6 : last + 14], "little")
    opus = head.find(b"OpusHead")
    if opus >= 0:
        # Opus always counts at 48 kHz; pre-skip samples are decoder warm-up, not sound.
        pre_skip = int.from_bytes(head[opus + 10 : opus + 12], "little")
        return max(0, granule - pre_skip) / 48_000
    vorbis = head.find(b"\x01vorbis")
    if vorbis >= 0:
        rate = int.from_bytes(head[vorbis + 12 : vorbis + 16], "little")
        return granule / rate if rate else None
    return None


def format_duration(seconds: float) -> str:
    """m:ss (h:mm:ss past an hour), as chat apps show a voice note's length."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
