"""Text out of the documents people send: plain-text formats as they are, PDFs through pypdf.

The only module that imports pypdf, and only when a PDF arrives: it is a large library most
gateways never need. Blocking: callers run it in a thread.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

# Files whose bytes are their text: prose, data and source code.
TEXT_SUFFIXES = frozenset(
    [
        ".txt",
        ".md",
        ".markdown",
        ".rst",
        ".csv",
        ".tsv",
        ".json",
        ".jsonl",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".conf",
        ".log",
        ".xml",
        ".html",
        ".htm",
        ".css",
        ".py",
        ".js",
        ".mjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".java",
        ".kt",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".go",
        ".rs",
        ".rb",
        ".php",
        ".swift",
        ".sh",
        ".bash",
        ".zsh",
        ".ps1",
        ".sql",
        ".r",
        ".lua",
        ".pl",
        ".scala",
        ".dart",
        ".vue",
        ".svelte",
        ".tex",
        ".srt",
        ".vtt",
    ]
)
READABLE_SUFFIXES = TEXT_SUFFIXES | {".pdf"}


class DocumentReadError(ValueError):
    """The document has no text we can read; the message says why in a few words."""


def document_text(path: Path, max_chars: int) -> tuple[str, int]:
    """The document's text, at most `max_chars` of it; and how many characters it has in all.

    Reading stops once the cap is passed, so a 500-page PDF costs what its first pages cost.
    """
    if path.suffix.lower() == ".pdf":
        return _pdf_text(path, max_chars)
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise DocumentReadError("binary content")
    text = data.decode("utf-8", errors="replace")
    return text[:max_chars], len(text)


def pdf_bytes_text(data: bytes, max_chars: int) -> tuple[str, int]:
    """A PDF's text from its bytes (a fetched page), as `document_text` reads a file's."""
    return _pdf_text(io.BytesIO(data), max_chars)


def _pdf_text(source: Path | BinaryIO, max_chars: int) -> tuple[str, int]:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(source)
        if reader.is_encrypted:
            raise DocumentReadError("the PDF is password-protected")
        pages: list[str] = []
        total = 0
        for number, page in enumerate(reader.pages, start=1):
            text = page.extract_text() or ""
            pages.append(f"[page {number}]\n{text.strip()}")
            # Counted as joined: a blank line between pages, none after the last.
            total += len(pages[-1]) + (2 if number > 1 else 0)
            if total > max_chars:
                # The remaining pages are not read: their size is unknown, so say "at least".
                break
    except PyPdfError as exc:
        raise DocumentReadError(f"not a readable PDF ({exc})") from exc
    joined = "\n\n".join(pages)
    if not any(line.strip() and not line.startswith("[page ") for line in joined.splitlines()):
        raise DocumentReadError("the PDF has no text layer (a scan?)")
    return joined[:max_chars], total
