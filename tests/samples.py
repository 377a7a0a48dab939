"""Real files for the media tests, made on the spot: images (Pillow), PDFs (pypdf), Ogg Opus.

The Ogg file is a real container (pages with their CRC) holding an OpusHead, an OpusTags and one
page whose granule position says how long the recording is; a transcriber on the wire gets it as
bytes, and memgate reads its duration from the headers as it does for a phone's voice note.
"""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import ContentStream, DictionaryObject, NameObject


def jpeg(width: int, height: int) -> bytes:
    """A JPEG photo of the given size (a gradient, so it is not trivially compressible)."""
    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=80)
    return buffer.getvalue()


def pdf(pages: list[str]) -> bytes:
    """A PDF with one page per string, each drawn in Helvetica, one line per `\\n`."""
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    for body in pages:
        page = writer.add_blank_page(612, 792)
        lines = [line.replace("(", "").replace(")", "") for line in body.split("\n")]
        ops = "".join(f"({line}) Tj 0 -14 Td " for line in lines)
        stream = ContentStream(None, writer)
        stream.set_data(f"BT /F1 11 Tf 50 750 Td {ops}ET".encode("latin-1"))
        page.replace_contents(stream)
        resources = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        page[NameObject("/Resources")] = resources
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def _ogg_crc(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def _ogg_page(packet: bytes, granule: int, sequence: int, flags: int) -> bytes:
    segments = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = struct.pack(
        "<4sBBqIIIB", b"OggS", 0, flags, granule, 0x4D47, sequence, 0, len(segments)
    )
    page = header + bytes(segments) + packet
    crc = _ogg_crc(page)
    return page[:22] + struct.pack("<I", crc) + page[26:]


def ogg_opus(seconds: float) -> bytes:
    """An Ogg Opus voice note that lasts `seconds` (its audio packet is silence-sized filler)."""
    pre_skip = 312
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, pre_skip, 48_000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 7) + b"memgate" + struct.pack("<I", 0)
    audio = zlib.compress(b"\x00" * 64)  # opaque bytes: nothing here decodes them
    granule = round(seconds * 48_000) + pre_skip
    return (
        _ogg_page(head, 0, 0, 0x02)
        + _ogg_page(tags, 0, 1, 0x00)
        + _ogg_page(audio, granule, 2, 0x04)
    )
