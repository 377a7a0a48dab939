"""The LLM's Markdown rendered to Slack's mrkdwn, and a reply cut into pieces that fit a message.

Each piece keeps the Markdown it came from: a piece Slack refuses as mrkdwn is sent again as
plain text (the discipline of Telegram's HTML). Pure stdlib: imports only `channels.base` of ours
and never the Slack SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from channels.base import FENCE, split_message

# Slack cuts a message's text past 40,000 characters but advises staying under 4,000; mrkdwn adds
# a little (escapes, link brackets), so the Markdown is split with room to spare.
SLACK_LIMIT = 4000
MARKDOWN_LIMIT = 3500

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t#]*$")
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+(.*)$")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_LINK = re.compile(r"\[([^\[\]\n]+)\]\((https?://[^()\s]+|mailto:[^()\s]+)\)")
_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_TOKEN = "\x00{}\x00"  # stands in for a finished span while the rest is rendered


@dataclass(frozen=True, slots=True)
class Piece:
    """One message: its mrkdwn, and the Markdown it came from (sent as plain text if refused)."""

    markdown: str
    mrkdwn: str


def render_pieces(text: str, limit: int = MARKDOWN_LIMIT) -> list[Piece]:
    """Split Markdown `text` (code blocks closed and reopened) and render each part."""
    return [Piece(part, render_mrkdwn(part)) for part in split_message(text, limit)]


def escape(text: str) -> str:
    """Slack's three control characters as entities (its only escaping)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_mrkdwn(text: str) -> str:
    """Markdown to mrkdwn: bold, italics, strikes, links, headings, bullets; code kept as code."""
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
            out.append("```")  # Slack shows no language; the info string would read as code
            continue
        if fence is not None:
            if match and match.group(1).startswith(fence) and not match.group(2).strip():
                fence = None
                out.append("```")
            else:
                out.append(escape(line))
            continue
        out.append(_render_line(line))
    if fence is not None:
        out.append("```")
    return "\n".join(out)


def _render_line(line: str) -> str:
    if _RULE.match(line):
        return "―――"
    heading = _HEADING.match(line)
    if heading:
        return f"*{_inline(heading.group(1))}*" if heading.group(1) else ""
    bullet = _BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {_inline(bullet.group(2))}"
    return _inline(line)


def _inline(text: str) -> str:
    """Inline Markdown of one line as mrkdwn; code spans and links are set aside first, so
    nothing inside them is read as emphasis."""
    kept: list[str] = []
    text = text.replace("\x00", "")  # the marker of a kept span; never in a message

    def keep(rendered: str) -> str:
        kept.append(rendered)
        return _TOKEN.format(len(kept) - 1)

    text = _CODE.sub(lambda m: keep(f"`{escape(m.group(2).strip())}`"), text)
    text = _LINK.sub(lambda m: keep(f"<{m.group(2)}|{escape(m.group(1))}>"), text)
    text = escape(text)
    text = _BOLD.sub(lambda m: keep(f"*{_italics(m.group(2))}*"), text)
    text = _italics(text)
    text = _STRIKE.sub(r"~\1~", text)
    while "\x00" in text:  # a bold span may hold a code span or a link: put back in turn
        text = re.sub("\x00(\\d+)\x00", lambda m: kept[int(m.group(1))], text)
    return text


def _italics(text: str) -> str:
    return _ITALIC.sub(r"_\1_", text)
