"""A request's side of the console: its CSRF token, the page around a view, notices carried
across a redirect, and reading a posted form."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from aiohttp import web

from gateway.console.html import page
from gateway.console.keys import Tickets
from gateway.console.sources import Sources

NOTES_KEPT = 64  # notices waiting to be shown after a redirect; older ones are dropped


@dataclass
class Console:
    sources: Sources
    tickets: Tickets
    cookie_name: str
    _notes: dict[str, str] = field(default_factory=dict)

    def csrf(self, request: web.Request) -> str:
        return self.tickets.csrf(request.cookies.get(self.cookie_name, ""))

    def render(self, request: web.Request, title: str, body: str) -> str:
        note = self._notes.pop(request.query.get("note", ""), "")
        return page(title, body, current="/" + request.path.split("/")[1], note=note)

    def respond(
        self, request: web.Request, title: str, body: str, *, status: int = 200
    ) -> web.Response:
        html = self.render(request, title, body)
        return web.Response(text=html, status=status, content_type="text/html")

    def done(self, location: str, note: str) -> web.HTTPSeeOther:
        """Back to `location` after a change, showing `note` once (POST, redirect, GET)."""
        key = secrets.token_urlsafe(8)
        self._notes[key] = note
        while len(self._notes) > NOTES_KEPT:
            del self._notes[next(iter(self._notes))]
        separator = "&" if "?" in location else "?"
        return web.HTTPSeeOther(f"{location}{separator}note={key}")


async def posted(request: web.Request, *names: str) -> dict[str, str]:
    """The named fields of a posted form, each a string ('' when absent)."""
    data = await request.post()
    return {name: str(data.get(name, "")) for name in names}
