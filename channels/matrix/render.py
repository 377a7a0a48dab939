"""A reply's Markdown as a Matrix message: `org.matrix.custom.html` with the Markdown text as
its plain `body` (what clients without HTML, notifications and bridges show).

Raw HTML the model writes is escaped, never passed on: only what Markdown itself produces goes
out. Part of the Matrix adapter; owns `markdown_it`. Imports nothing of ours.
"""

from __future__ import annotations

import html
import logging
from typing import Any

from markdown_it import MarkdownIt

log = logging.getLogger(__name__)

HTML_FORMAT = "org.matrix.custom.html"
# CommonMark with tables and strikethrough, as chat clients render them; `html: False` escapes
# any tag in the text, so the model cannot put an <img> that loads a URL in a client.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(
    ["table", "strikethrough"]
)


def render_html(text: str) -> str:
    """The HTML of Markdown `text` (trailing newline removed)."""
    return str(_MARKDOWN.render(text)).strip()


def message_content(text: str, *, formatted: bool = True) -> dict[str, Any]:
    """An `m.text` content: the Markdown as `body`, and its HTML where it says more than the
    text does (a plain sentence goes without a formatted body)."""
    content: dict[str, Any] = {"msgtype": "m.text", "body": text}
    if not formatted:
        return content
    rendered = render_html(text)
    if rendered and rendered != f"<p>{html.escape(text, quote=False)}</p>":
        content["format"] = HTML_FORMAT
        content["formatted_body"] = rendered
    return content
