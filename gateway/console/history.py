"""The History page: HISTORY.md as a timeline, newest first, and a search over it and the rest of
memory through the same memory search the model's `memory_search` tool and `memgate memory search`
use."""

from __future__ import annotations

import asyncio
import re

from aiohttp import web

from gateway.console.html import e, markdown
from gateway.console.view import Console
from memory.search.text import HIGHLIGHT_CLOSE, HIGHLIGHT_OPEN

SHOWN = 200  # entries on the page
STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2})?)\]\s*")


def entries(history: str) -> list[tuple[str, str]]:
    """HISTORY.md's entries, newest first, each as (its date, its text without the date)."""
    found = []
    for block in history.split("\n\n"):
        if not block.strip():
            continue
        stamp = STAMP.match(block)
        found.append((stamp.group(1), block[stamp.end() :]) if stamp else ("", block))
    return list(reversed(found))


def routes(console: Console) -> list[web.RouteDef]:
    files = console.sources.memory

    async def show(request: web.Request) -> web.Response:
        query = request.query.get("q", "").strip()
        search = (
            '<form method="get" action="/history" class="row" role="search">'
            f'<input type="search" name="q" value="{e(query)}" placeholder="Search memory" '
            'aria-label="Search memory"><button>Search</button></form>'
        )
        if query:
            body = search + await _hits(console, query)
        else:
            found = entries(await asyncio.to_thread(files.read_history))
            shown = "".join(
                f'<article class="entry"><time>{e(when or "undated")}</time>{markdown(text)}</article>'
                for when, text in found[:SHOWN]
            )
            more = f"<p class=muted>{len(found) - SHOWN} older entries not shown.</p>"
            body = (
                search
                + (shown or '<p class="empty">HISTORY.md is empty.</p>')
                + (more if len(found) > SHOWN else "")
            )
        return console.respond(request, "History", body)

    return [web.get("/history", show)]


async def _hits(console: Console, query: str) -> str:
    search = console.sources.search
    if search is None:
        return '<p class="empty">Memory search is off in this gateway.</p>'
    hits = await search.search(query, 30)
    if not hits:
        return f'<p class="empty">No matches for {e(query)}.</p>'
    shown = []
    for hit in hits:
        snippet = (
            e(hit.snippet)
            .replace(e(HIGHLIGHT_OPEN), "<mark>")
            .replace(e(HIGHLIGHT_CLOSE), "</mark>")
        )
        shown.append(
            f'<article class="entry"><time>{e(hit.date or "undated")} · {e(hit.kind)} · '
            f"{e(hit.path)}:{hit.line}</time><p>{snippet}</p></article>"
        )
    return "".join(shown)
