"""A fetched response's readable text: an HTML page's main content as Markdown-ish text (through
trafilatura, made for it: navigation, scripts and boilerplate left out), JSON pretty-printed,
plain text as it is, a PDF through the reader it is given (the media reader's).

The only module that imports trafilatura, and only when a page arrives (it takes most of a second
to import). Blocking: callers run it in a thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

# A PDF's text from its bytes, at most so many characters; and how many it has in all.
PdfText = Callable[[bytes, int], tuple[str, int]]

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset(
    {"application/xml", "application/javascript", "application/x-yaml", "application/yaml"}
)


class ExtractError(ValueError):
    """The response holds nothing we can read as text; the message says why in a few words."""


@dataclass(frozen=True)
class Extract:
    title: str | None
    text: str


def extract(
    body: bytes, content_type: str, charset: str | None, pdf_text: PdfText, max_chars: int
) -> Extract:
    """The text of `body`, served as `content_type` (without parameters, lowercase)."""
    if content_type == "application/pdf" or body.startswith(b"%PDF-"):
        try:
            text, _ = pdf_text(body, max_chars)
        except ValueError as exc:  # DocumentReadError: no text layer, encrypted, broken
            raise ExtractError(str(exc)) from exc
        return Extract(None, text)
    decoded = _decode(body, charset)
    if content_type in HTML_TYPES:
        return _html(decoded)
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return Extract(None, json.dumps(json.loads(decoded), indent=1, ensure_ascii=False))
        except json.JSONDecodeError:
            return Extract(None, decoded)  # cut short, or not JSON after all: as it came
    if content_type.startswith("text/") or content_type in TEXT_TYPES or not content_type:
        if b"\x00" in body[:8192]:
            raise ExtractError("binary content")
        return Extract(None, decoded)
    raise ExtractError(f"content of type {content_type} is not text, a page or a PDF")


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def _html(html: str) -> Extract:
    import trafilatura
    from trafilatura.metadata import extract_metadata

    text = trafilatura.extract(
        html,
        output_format="markdown",
        include_comments=False,
        include_tables=True,
        include_links=False,
        favor_recall=True,
    )
    if not text:
        # No main content found (a short page, a listing): the page's whole text, still without
        # scripts and styles.
        text = trafilatura.html2txt(html)
    metadata = extract_metadata(html)
    title = metadata.title if metadata is not None and metadata.title else None
    return Extract(title, text.strip())
