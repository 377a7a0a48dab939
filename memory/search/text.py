"""Text handling for memory search: CJK segmentation, query parsing and snippets.

FTS5's unicode61 tokenizer keeps a run of Chinese or Japanese characters as one token, so the index
stores each CJK character as a token of its own (separated by U+200B, a separator to unicode61 that
snippets drop again). A CJK word in a query is then a phrase of its characters: 咖啡 matches 咖
followed by 啡 anywhere, and a one-character word such as 猫 works the same way. Latin words go
through FTS5's porter stemmer, case- and accent-insensitively.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u2e80-\u2fdf"  # CJK radicals
    "\u3005-\u3007"  # 々 〆 〇
    "\u3021-\u3029"  # Hangzhou numerals
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
_CJK_RUN = re.compile(f"[{_CJK_RANGES}]+")
_CJK_CHAR = re.compile(f"[{_CJK_RANGES}]")
# What unicode61 keeps as one token: letters and digits (not "_"), CJK excepted.
_TOKEN = re.compile(f"[{_CJK_RANGES}]|(?:(?![{_CJK_RANGES}])[^\\W_])+")
# A query is cut into chunks at spaces and punctuation that separates words; the tokens of one
# chunk ("2026-01-03", "e-mail", "我每天喝咖啡") must be adjacent, in order, to match.
_CHUNK = re.compile(r'"([^"]*)"|([^\s,;!?()\[\]{}"“”‘’«»<>，。！？、；：（）【】「」『』《》]+)')

# Full-width Latin letters and digits (Ｐｙｔｈｏｎ, ２０２６) are folded to ASCII; full-width
# punctuation is left alone so snippets show the text as written.
_FULLWIDTH = {code: code - 0xFEE0 for code in range(0xFF10, 0xFF5B) if chr(code - 0xFEE0).isalnum()}
SEPARATOR = "\u200b"
HIGHLIGHT_OPEN = "«"
HIGHLIGHT_CLOSE = "»"
MAX_LOOSE_TERMS = 32


def normalize(text: str) -> str:
    return unicodedata.normalize("NFC", text).translate(_FULLWIDTH)


def segment(text: str) -> str:
    """Text as stored in the index: NFC, full-width alphanumerics folded, CJK split per character."""
    text = normalize(text).replace(SEPARATOR, " ")
    return _CJK_RUN.sub(lambda m: SEPARATOR + SEPARATOR.join(m.group()) + SEPARATOR, text)


def unsegment(text: str) -> str:
    return text.replace(SEPARATOR, "")


@dataclass(frozen=True)
class Query:
    """FTS5 expressions for one search: `strict` needs every chunk, `loose` any word of it."""

    strict: str
    loose: str | None


def _phrase(tokens: list[str], prefix: bool = False) -> str:
    # Tokens hold only letters and digits, so quoting is enough to neutralise FTS5 syntax.
    return '"' + " ".join(tokens) + '"' + (" *" if prefix else "")


def parse_query(text: str) -> Query | None:
    """Turn what a person or the model typed into FTS5 queries; None if it has no words."""
    text = normalize(text)
    phrases: list[str] = []
    loose: list[str] = []
    for match in _CHUNK.finditer(text):
        quoted, bare = match.group(1), match.group(2)
        chunk = quoted if quoted is not None else bare
        tokens = _TOKEN.findall(chunk)
        if not tokens:
            continue
        prefix = bare is not None and bare.endswith("*") and not _CJK_CHAR.match(tokens[-1])
        phrases.append(_phrase(tokens, prefix))
        loose.extend(_loose_terms(tokens, prefix))
    if not phrases:
        return None
    strict = " AND ".join(dict.fromkeys(phrases))
    terms = list(dict.fromkeys(loose))[:MAX_LOOSE_TERMS]
    loose_expr = " OR ".join(terms)
    return Query(strict, loose_expr if loose_expr != strict else None)


def _loose_terms(tokens: list[str], prefix: bool) -> list[str]:
    """Each Latin word alone; a CJK run as its overlapping character pairs (咖啡馆: 咖啡, 啡馆)."""
    terms: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) == 1:
            terms.append(_phrase(run))
        terms.extend(_phrase(run[i : i + 2]) for i in range(len(run) - 1))
        run.clear()

    for index, token in enumerate(tokens):
        if _CJK_CHAR.match(token):
            run.append(token)
            continue
        flush()
        terms.append(_phrase([token], prefix and index == len(tokens) - 1))
    flush()
    return terms


def make_snippet(highlighted: str, width: int = 200) -> str:
    """One line of about `width` characters around the first highlighted match."""
    text = " ".join(unsegment(highlighted).split())
    if len(text) <= width:
        return text
    first = text.find(HIGHLIGHT_OPEN)
    begin = max(0, first - width // 4) if first >= 0 else 0
    end = min(len(text), begin + width)
    begin = max(0, min(begin, end - width))
    if begin > 0:
        space = text.find(" ", begin, begin + 20)
        if space >= 0 and (first < 0 or space < first):
            begin = space + 1
    if end < len(text):
        space = text.rfind(" ", end - 20, end)
        if space > begin and space > text.find(HIGHLIGHT_CLOSE, begin):
            end = space
    piece = text[begin:end]
    # A cut through a highlighted span closes or reopens it, so the markers stay paired.
    opened = piece.rfind(HIGHLIGHT_OPEN)
    if opened > piece.rfind(HIGHLIGHT_CLOSE):
        piece += HIGHLIGHT_CLOSE
    first_open, first_close = piece.find(HIGHLIGHT_OPEN), piece.find(HIGHLIGHT_CLOSE)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        piece = HIGHLIGHT_OPEN + piece
    return ("…" if begin > 0 else "") + piece + ("…" if end < len(text) else "")
