"""Search results for people: hits as one line each, and a progress bar for indexing.

`memgate memory search` prints these; the memory_search tool gives the model the same lines
without colour.
"""

from __future__ import annotations

from typing import TextIO

from memory.search.index import Progress
from memory.search.searcher import Hit
from memory.search.text import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN


def format_hits(hits: list[Hit], *, color: bool = False) -> str:
    """One line per hit, `path:line  date  kind  snippet`; `color` bolds the matches (ANSI)."""
    lines = []
    for hit in hits:
        snippet = hit.snippet
        if color:
            snippet = snippet.replace(HIGHLIGHT_OPEN, "\x1b[1;33m").replace(
                HIGHLIGHT_CLOSE, "\x1b[0m"
            )
        date = hit.date or "-"
        lines.append(f"{hit.path}:{hit.line}  {date}  {hit.kind}  {snippet}")
    return "\n".join(lines)


def terminal_progress(stream: TextIO, width: int = 30) -> Progress:
    """A progress bar for `rebuild()`/`refresh()` on a terminal (called from a worker thread)."""
    shown = [-1]

    def show(done: int, total: int) -> None:
        filled = width * done // max(total, 1)
        if filled == shown[0] and done < total:
            return
        shown[0] = filled
        bar = "#" * filled + "." * (width - filled)
        stream.write(f"\rindexing memory [{bar}] {done / 1e6:.1f}/{total / 1e6:.1f} MB")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show
