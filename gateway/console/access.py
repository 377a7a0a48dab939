"""The Access page: pairing codes waiting (approve, reject), approved senders (revoke), who is
held after a rejection, and the owners (allow_from, read-only: the config file is theirs). Every
change is `memgate pairing`'s own call on the pairing file, which the channels read under its lock
on every stranger's message."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

from aiohttp import web

from channels.pairing import Approved, PairingError, PairingStore, Pending, Rejected
from gateway.console.html import e, form, table
from gateway.console.view import Console, posted


def routes(console: Console) -> list[web.RouteDef]:
    store = console.sources.pairing
    tz = console.sources.config.tz

    def when(epoch: float) -> str:
        return e(datetime.fromtimestamp(epoch, tz).strftime("%Y-%m-%d %H:%M"))

    async def show(request: web.Request) -> web.Response:
        pending, approved, rejected = await asyncio.to_thread(_read, store)
        csrf = console.csrf(request)
        waiting = table(
            ["code", "sender", "name", "asked", ""],
            (
                [
                    f"<code>{e(p.code)}</code>",
                    e(f"{p.channel}:{p.sender_id}"),
                    e(p.name or "-"),
                    when(p.created_at),
                    form("/access/approve", csrf, {"code": p.code}, "Approve")
                    + " "
                    + form("/access/reject", csrf, {"code": p.code}, "Reject", danger=True),
                ]
                for p in pending
            ),
            "No pairing codes are waiting.",
        )
        let_in = table(
            ["sender", "name", "approved", ""],
            (
                [
                    e(a.address),
                    e(a.name or "-"),
                    f"by {e(a.approved_by)} {when(a.approved_at)}",
                    form("/access/revoke", csrf, {"address": a.address}, "Revoke", danger=True),
                ]
                for a in approved
            ),
            "Nobody has been let in by pairing.",
        )
        held = table(
            ["sender", "name", "rejected"],
            ([e(r.address), e(r.name or "-"), when(r.rejected_at)] for r in rejected),
            "Nobody is held after a rejection.",
        )
        owners = table(
            ["channel", "allow_from"],
            (
                [e(channel), e(", ".join(ids) or "(nobody)")]
                for channel, ids in console.sources.owners().items()
            ),
            "No channel.",
        )
        body = (
            "<h2>Waiting</h2><p class=muted>A stranger who writes to the bot gets a code, valid for "
            "an hour; approving it lets them in as a guest from their next message.</p>"
            f"{waiting}<h2>Let in</h2>{let_in}<h2>Held</h2>"
            "<p class=muted>No new code for an hour after a rejection.</p>"
            f"{held}<h2>Owners</h2><p class=muted>From the config file (allow_from); change "
            f"them there and reload with SIGHUP.</p>{owners}"
        )
        return console.respond(request, "Access", body)

    def change(
        field: str, act: Callable[[PairingStore, str], str]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            value = (await posted(request, field))[field].strip()
            try:
                note = await asyncio.to_thread(act, store, value)
            except PairingError as exc:
                note = f"Nothing changed: {exc}"
            raise console.done("/access", note)

        return handler

    return [
        web.get("/access", show),
        web.post("/access/approve", change("code", _approve)),
        web.post("/access/reject", change("code", _reject)),
        web.post("/access/revoke", change("address", _revoke)),
    ]


def _read(store: PairingStore) -> tuple[list[Pending], list[Approved], list[Rejected]]:
    return store.pending(), store.approved(), store.rejected()


def _approve(store: PairingStore, code: str) -> str:
    approved = store.approve(code, "console")
    return f"Approved {approved.address} ({approved.name or 'no name'}); their next message is answered."


def _reject(store: PairingStore, code: str) -> str:
    rejected = store.reject(code)
    return f"Rejected {rejected.code} ({rejected.channel}:{rejected.sender_id}); no new code for them for an hour."


def _revoke(store: PairingStore, address: str) -> str:
    revoked = store.revoke(address)
    return f"Revoked {revoked.address}; their next message goes unanswered."
