"""The Memory page: MEMORY.md rendered, its kept versions, a diff between any two, a restore and an
edit. Both changes are compare-and-writes through the service's memory writer (the one
consolidation writes through): the page carries a digest of the text it showed, and a file that
changed since is shown beside the owner's text, never written over."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import datetime
from pathlib import Path

from aiohttp import web

from gateway.console.html import diff, e, form, markdown, table
from gateway.console.view import Console, posted
from memory.errors import MemoryChangedError, VersionNotFoundError
from memory.files import MemoryFiles

CURRENT = "current"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _versions(files: MemoryFiles) -> list[Path]:
    return list(reversed(files.list_versions()))  # newest first


def _text_of(files: MemoryFiles, name: str) -> str | None:
    """MEMORY.md (`current`) or a kept version by its file name; None for any other name."""
    if name == CURRENT:
        return files.read_memory()
    for path in files.list_versions():
        if path.name == name:
            return path.read_text(encoding="utf-8")
    return None


def routes(console: Console) -> list[web.RouteDef]:
    files = console.sources.memory
    tz = console.sources.config.tz

    async def show(request: web.Request) -> web.Response:
        text = await asyncio.to_thread(files.read_memory)
        versions = await asyncio.to_thread(_versions, files)
        csrf = console.csrf(request)
        rows = [
            [
                e(path.name),
                e(datetime.fromtimestamp(path.stat().st_mtime, tz).strftime("%Y-%m-%d %H:%M")),
                e(f"{path.stat().st_size:,} bytes"),
                f'<a href="/memory/diff?a={e(path.name)}&amp;b={CURRENT}">diff with current</a>',
                form(
                    "/memory/restore",
                    csrf,
                    {"version": path.name, "seen": digest(text)},
                    "Restore",
                ),
            ]
            for path in versions
        ]
        choices = "".join(f'<option value="{e(p.name)}">{e(p.name)}</option>' for p in versions)
        picker = (
            '<form method="get" action="/memory/diff" class="row"><label>Compare '
            f'<select name="a">{choices}<option value="{CURRENT}">current</option></select></label>'
            f'<label>with <select name="b"><option value="{CURRENT}">current</option>{choices}'
            "</select></label><button>Diff</button></form>"
            if versions
            else ""
        )
        body = (
            '<p><a href="/memory/edit">Edit MEMORY.md</a></p>'
            f"{markdown(text)}<h2>Kept versions</h2>"
            '<p class="muted">Every rewrite keeps the text it replaced; a restore keeps the current '
            "text too.</p>"
            f"{picker}"
            + table(
                ["version", "kept", "size", "", ""],
                rows,
                "No previous versions of MEMORY.md are kept yet.",
            )
        )
        return console.respond(request, "Memory", body)

    async def compare(request: web.Request) -> web.Response:
        a, b = request.query.get("a", ""), request.query.get("b", CURRENT)
        before = await asyncio.to_thread(_text_of, files, a)
        after = await asyncio.to_thread(_text_of, files, b)
        if before is None or after is None:
            return console.respond(
                request, "Diff", _unknown(a if before is None else b), status=404
            )
        body = f'<p><a href="/memory">Back to Memory</a></p>{diff(before, after, a, b)}'
        return console.respond(request, f"{a} → {b}", body)

    async def restore(request: web.Request) -> web.Response:
        form_ = await posted(request, "version", "seen")
        version = form_["version"]
        chosen = await asyncio.to_thread(_text_of, files, version)
        if chosen is None or version == CURRENT:
            return console.respond(request, "Restore", _unknown(version), status=404)
        current = await asyncio.to_thread(files.read_memory)
        try:
            if digest(current) != form_["seen"]:
                raise MemoryChangedError("MEMORY.md changed since the page was shown")
            await asyncio.to_thread(lambda: files.restore(version, expected=current))
        except MemoryChangedError:
            now = await asyncio.to_thread(files.read_memory)
            return _conflict(console, request, "restore " + version, chosen, now)
        except VersionNotFoundError:
            return console.respond(request, "Restore", _unknown(version), status=404)
        raise console.done(
            "/memory", f"Restored MEMORY.md from {version}; the text it replaced is kept."
        )

    async def edit(request: web.Request) -> web.Response:
        text = await asyncio.to_thread(files.read_memory)
        body = _editor(console.csrf(request), text, digest(text))
        return console.respond(request, "Edit MEMORY.md", body)

    async def save(request: web.Request) -> web.Response:
        form_ = await posted(request, "text", "seen")
        text = form_["text"].replace("\r\n", "\n")
        if text and not text.endswith("\n"):
            text += "\n"
        current = await asyncio.to_thread(files.read_memory)
        try:
            if digest(current) != form_["seen"]:
                raise MemoryChangedError("MEMORY.md changed since the page was shown")
            await asyncio.to_thread(lambda: files.write_memory(text, expected=current))
        except MemoryChangedError:
            now = await asyncio.to_thread(files.read_memory)
            return _conflict(console, request, "edit", text, now)
        raise console.done("/memory", "Saved MEMORY.md; the text it replaced is kept.")

    return [
        web.get("/memory", show),
        web.get("/memory/diff", compare),
        web.post("/memory/restore", restore),
        web.get("/memory/edit", edit),
        web.post("/memory/edit", save),
    ]


def _editor(csrf: str, text: str, seen: str) -> str:
    return (
        '<form method="post" action="/memory/edit">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">'
        f'<input type="hidden" name="seen" value="{e(seen)}">'
        f'<textarea name="text" aria-label="MEMORY.md" spellcheck="false">{e(text)}</textarea>'
        '<p><button>Save</button> <a href="/memory">Cancel</a></p></form>'
    )


def _unknown(name: str) -> str:
    return f'<p class="note error">No version named {e(name)}.</p><p><a href="/memory">Back</a></p>'


def _conflict(
    console: Console, request: web.Request, what: str, yours: str, now: str
) -> web.Response:
    """409: MEMORY.md changed under the owner; both texts shown, nothing written."""
    body = (
        f'<p class="note error">MEMORY.md changed since this page was shown (a consolidation or '
        f"another edit), so the {e(what)} was not written. Both texts are below; nothing was "
        "lost.</p>"
        f'<div class="columns"><section><h2>Yours</h2><pre>{e(yours)}</pre></section>'
        f"<section><h2>MEMORY.md now</h2><pre>{e(now)}</pre></section></div>"
        f"<h2>What differs</h2>{diff(yours, now, 'yours', 'MEMORY.md now')}"
        + _editor(console.csrf(request), yours, digest(now)).replace(
            "<textarea", "<h2>Start again from yours</h2><textarea", 1
        )
    )
    return console.respond(request, "Not written: MEMORY.md changed", body, status=409)
