"""The LLM's Markdown rendered to Telegram's HTML subset, and a reply cut into sendable pieces.

Pure stdlib: imports only `channels.base` of ours and never the Telegram SDK.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from channels.base import FENCE, split_message
from channels.utf16 import utf16_length

TELEGRAM_LIMIT = 4096  # UTF-16 code units per message

# FENCE is split_message's own rule, so a piece it closes and reopens renders whole.
_LANG_WORD = re.compile(r"[\w+#.-]{1,32}")
_LONG_FENCE = re.compile(r"(?m)^(\s*)(`{17,}|~{17,})")
_LONG_INFO = re.compile(r"(?m)^(\s*(?:```+|~~~+))([^`\n]{64,})$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_QUOTE = re.compile(r"^ {0,3}>")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(.*)$")
_ORDERED = re.compile(r"^([ \t]*)(\d{1,9})([.)])[ \t]+(.*)$")
_LANG = re.compile(r"[^\w+#.-]")

_LINK = re.compile(
    r"\[([^\[\]\n]*(?:\[[^\[\]\n]*\][^\[\]\n]*)*)\]"  # label, one level of nested brackets
    r"\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)"  # destination, one level of nested parentheses
    r"(?:[ \t]+\"[^\"\n]*\")?\)"  # optional title, dropped
)
_AUTOLINK = re.compile(r"<((?:https?|tg|mailto):[^\s<>]+)>", re.IGNORECASE)
_BARE_URL = re.compile(r"https?://[^\s<>]+", re.IGNORECASE)
_SAFE_SCHEME = re.compile(r"(?:https?://|tg://|mailto:)\S", re.IGNORECASE)
_ESCAPABLE = frozenset("\\`*_{}[]()#+-.!|~<>")
# A run of characters none of _inline's branches starts at (escapes, code, links, bare URLs,
# emphasis): copied through whole instead of one character at a time.
_PLAIN = re.compile(r"[^\\`\[<hH*_~]+")

# Delimiter runs tried at each position, longest first, with the tag each one makes.
_EMPHASIS = (("**", "b"), ("__", "b"), ("~~", "s"), ("*", "i"), ("_", "i"))


@dataclass(frozen=True, slots=True)
class Piece:
    """One message to send: its HTML, and the Markdown it came from (sent if HTML is refused)."""

    markdown: str
    html: str


def render_pieces(text: str, limit: int = TELEGRAM_LIMIT) -> list[Piece]:
    """Split Markdown `text` and render each part, so every piece's HTML and Markdown fit `limit`.

    The Markdown is split first (paragraph, line, word; code blocks closed and reopened), with a
    margin for the tags rendering adds; a part whose HTML still comes out too long is split again.
    """
    return [piece for part in markdown_parts(text, limit) for piece in render_part(part, limit)]


def markdown_parts(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """The Markdown parts `render_pieces` renders, one message each unless its HTML outgrows it.

    Every part but the last stays the same as more text is appended, so a reply streamed into
    messages can finish each one as soon as the next begins.
    """
    if limit < 64:
        raise ValueError("limit too small for a rendered piece")
    margin = min(256, limit // 4)
    return [p for p in split_message(_tame_fences(text), limit - margin, utf16_length) if p.strip()]


def render_part(part: str, limit: int = TELEGRAM_LIMIT) -> list[Piece]:
    """One Markdown part as pieces that fit `limit` (one, unless escaping made it too long)."""
    return _fit(part, limit)


def _tame_fences(text: str) -> str:
    """Fence lines that splitting could not close and reopen within a piece, made short.

    A marker run over 16 becomes 16 (openers and closers still pair up); an info string too long
    to be a language moves to the first line of the block, so no text is lost.
    """
    text = _LONG_FENCE.sub(lambda m: m.group(1) + m.group(2)[0] * 16, text)
    return _LONG_INFO.sub(lambda m: f"{m.group(1)}\n{m.group(2)}", text)


def _fit(part: str, limit: int) -> list[Piece]:
    rendered = render_html(part)
    if utf16_length(rendered) <= limit:
        return [Piece(part, rendered)]
    # Escapes can grow text fivefold (& → &amp;): halve until each half renders within the limit.
    smaller = max(16, utf16_length(part) // 2)
    return [p for sub in split_message(part, smaller, utf16_length) for p in _fit(sub, limit)]


def render_html(text: str) -> str:
    """Markdown → Telegram HTML: every tag balanced, every other character escaped."""
    lines = text.split("\n")
    out: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            out.append(_inline("\n".join(paragraph)))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        # CommonMark: "```x```" on one line is inline code, not a fence (info can't hold a `).
        if fence and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
            flush()
            marker, info = fence.group(1), fence.group(2).strip()
            body: list[str] = []
            if info and not _LANG_WORD.fullmatch(info):
                # Not a language name (a split that put words after a fence marker, a URL):
                # text the reader must still see, so it opens the block instead of vanishing.
                body.append(info)
                info = ""
            i += 1
            while i < len(lines) and not _closes(lines[i], marker):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence, or past the end when the block was left open
            out.append(_code_block("\n".join(body), info))
            continue
        if _QUOTE.match(line):
            flush()
            quoted: list[str] = []
            while i < len(lines) and _QUOTE.match(lines[i]):
                quoted.append(re.sub(r"^(?: {0,3}> ?)+", "", lines[i]))
                i += 1
            out.append(f"<blockquote>{_inline(chr(10).join(quoted))}</blockquote>")
            continue
        i += 1
        if not line.strip():
            flush()
            out.append(line)
        elif heading := _HEADING.match(line):
            flush()
            title = heading.group(2)
            out.append(f"<b>{_inline(title, frozenset({'b'}))}</b>" if title.strip() else "")
        elif _RULE.match(line):
            flush()
            out.append("———")
        elif bullet := _BULLET.match(line):
            flush()
            out.append(f"{bullet.group(1)}• {_inline(bullet.group(2))}")
        elif ordered := _ORDERED.match(line):
            flush()
            indent, number, dot, rest = ordered.groups()
            out.append(f"{indent}{number}{dot} {_inline(rest)}")
        else:
            paragraph.append(line)
    flush()
    return "\n".join(out)


def _closes(line: str, marker: str) -> bool:
    match = FENCE.match(line)
    return bool(
        match
        and match.group(1)[0] == marker[0]
        and len(match.group(1)) >= len(marker)
        and not match.group(2).strip()
    )


def _code_block(code: str, info: str) -> str:
    body = _escape(code)
    lang = _LANG.sub("", info.split()[0])[:32] if info else ""
    if lang:
        return f'<pre><code class="language-{lang}">{body}</code></pre>'
    return f"<pre>{body}</pre>"


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def _attr(url: str) -> str:
    return html.escape(url, quote=False).replace('"', "&quot;")


def _inline(s: str, active: frozenset[str] = frozenset()) -> str:
    """Render the inline Markdown of one block; `active` are the tags already open around it."""
    out: list[str] = []
    dead: dict[str, int] = {}  # delimiter -> position after which it has no closer
    i, n = 0, len(s)
    while i < n:
        if plain := _PLAIN.match(s, i):
            # No branch below can start at any of these characters: escape the run at once.
            out.append(_escape(plain.group()))
            i = plain.end()
            continue
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in _ESCAPABLE:
            out.append(_escape(s[i + 1]))
            i += 2
            continue
        if c == "`":
            span = _code_span(s, i)
            if span is None:
                run = _run_length(s, i, "`")
                out.append("`" * run)
                i += run
            else:
                code, i = span
                # Telegram lets no entity sit inside a link's code, so keep a link's label flat.
                out.append(_escape(code) if "a" in active else f"<code>{_escape(code)}</code>")
            continue
        if c == "[" and "a" not in active and (link := _LINK.match(s, i)):
            label, url = link.group(1), link.group(2)
            if label.strip() and _SAFE_SCHEME.match(url):
                out.append(f'<a href="{_attr(url)}">{_inline(label, active | {"a"})}</a>')
                i = link.end()
                continue
        if c == "<" and "a" not in active and (auto := _AUTOLINK.match(s, i)):
            url = auto.group(1)
            out.append(f'<a href="{_attr(url)}">{_escape(url)}</a>')
            i = auto.end()
            continue
        if c in "hH" and (i == 0 or not s[i - 1].isalnum()) and (bare := _BARE_URL.match(s, i)):
            # A bare URL is left for Telegram to link; its underscores are not emphasis.
            out.append(_escape(bare.group(0)))
            i = bare.end()
            continue
        if c in "*_~" and (emphasis := _emphasis(s, i, active, dead)):
            tag, inner, i = emphasis
            out.append(f"<{tag}>{_inline(inner, active | {tag})}</{tag}>")
            continue
        out.append(_escape(c))
        i += 1
    return "".join(out)


def _run_length(s: str, i: int, char: str) -> int:
    end = i
    while end < len(s) and s[end] == char:
        end += 1
    return end - i


def _code_span(s: str, i: int) -> tuple[str, int] | None:
    """The code of the backtick span opening at `i` and the index after it, or None."""
    run = _run_length(s, i, "`")
    ticks = "`" * run
    start = search = i + run
    while True:
        at = s.find(ticks, search)
        if at < 0:
            return None
        close_run = _run_length(s, at, "`")
        if close_run == run:
            code = s[start:at]
            if len(code) > 2 and code[0] == " " and code[-1] == " " and code.strip():
                code = code[1:-1]
            if not code.strip():
                return None
            return code, at + run
        search = at + close_run


def _emphasis(
    s: str, i: int, active: frozenset[str], dead: dict[str, int]
) -> tuple[str, str, int] | None:
    """(tag, inner text, index after the closer) for an emphasis opening at `i`, or None."""
    n = len(s)
    for delim, tag in _EMPHASIS:
        if tag in active or not s.startswith(delim, i):
            continue
        start = i + len(delim)
        if start >= n or s[start].isspace() or s[start] == delim[0]:
            continue
        if delim[0] == "_" and i > 0 and s[i - 1].isalnum():
            continue  # snake_case is not emphasis
        end = _closer(s, start, delim, dead)
        if end is not None:
            return tag, s[start:end], end + len(delim)
    return None


def _closer(s: str, start: int, delim: str, dead: dict[str, int]) -> int | None:
    """Index of the first valid closing `delim` after `start`, skipping code spans."""
    if dead.get(delim, len(s)) <= start:
        return None
    search = start + 1
    while True:
        at = s.find(delim, search)
        if at < 0:
            dead[delim] = min(dead.get(delim, len(s)), start)
            return None
        skip_to = _code_span_around(s, search, at)
        if skip_to is not None:
            search = skip_to
            continue
        after = at + len(delim)
        if (
            not s[at - 1].isspace()
            and s[at - 1] != delim[0]
            and (after >= len(s) or s[after] != delim[0])
            and not (delim[0] == "_" and after < len(s) and s[after].isalnum())
        ):
            return at
        search = at + 1


def _code_span_around(s: str, search: int, at: int) -> int | None:
    """End of a code span that starts in `s[search:at]` and covers `at`, else None."""
    tick = s.find("`", search, at)
    while tick >= 0:
        span = _code_span(s, tick)
        if span is None:
            tick = s.find("`", tick + _run_length(s, tick, "`"), at)
        elif span[1] > at:
            return span[1]
        else:
            tick = s.find("`", span[1], at)
    return None
