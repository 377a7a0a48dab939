"""Text measured and cut in UTF-16 code units, the way Telegram counts lengths and entity offsets.

A lone surrogate ("\ud800" in an update's JSON) is one unit to Telegram: "surrogatepass" measures
and slices it the same way, and decoding with "replace" turns it into U+FFFD, which every file and
wire format can carry. Imports nothing of ours.
"""

from __future__ import annotations


def _units(text: str) -> bytes:
    return text.encode("utf-16-le", errors="surrogatepass")


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units (Telegram's limit of 4096 counts these)."""
    return len(_units(text)) // 2


def utf16_slice(text: str, offset: int, length: int) -> str:
    """The part of `text` an entity's (offset, length) in UTF-16 units points at."""
    return _units(text)[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


def utf16_cut(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the (offset, length) UTF-16 spans, any lone surrogate replaced."""
    data = _units(text)
    for offset, length in sorted(spans, reverse=True):
        data = data[: offset * 2] + data[(offset + length) * 2 :]
    return data.decode("utf-16-le", errors="replace")
