"""The Chats page: every live session (its channel, messages, last activity, consolidation pointer,
answers still owed) and one chat's messages, read-only, tool calls folded. Read from the session
files in a worker thread; nothing here writes them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from gateway.console.html import e, table
from gateway.console.view import Console
from gateway.state import session_figures_path
from memory.sessions.figures import FiguresCache
from memory.sessions.file import read_session
from memory.sessions.store import SessionStore

SHOWN = 200  # the last messages of a chat shown on its page


@dataclass(frozen=True)
class Chat:
    key: str
    messages: int
    consolidated: int
    owed: int
    last_active: str
    group: bool


def list_chats(store: SessionStore, figures_path: Path) -> list[Chat]:
    """Every live session, most recently active first. Each file's figures come from the cache
    `memgate status` keeps (memory/sessions/figures.py): only what was appended since it was
    last looked at is read, so the page does not read every chat of a busy workspace."""
    cache = FiguresCache(figures_path)  # one per call: pages may be asked for at once
    chats = []
    keys = store.keys()  # the files on disk
    for key in keys:
        figures = cache.figures(store.path_for(key))
        chats.append(
            Chat(
                key,
                figures.messages,
                figures.pointer,
                len(figures.owed),
                figures.last_active,
                figures.group,
            )
        )
    cache.save()
    return sorted(chats, key=lambda chat: chat.last_active, reverse=True)


def routes(console: Console) -> list[web.RouteDef]:
    config = console.sources.config
    store = SessionStore(config.workspace / "sessions", config.tz)

    async def show(request: web.Request) -> web.Response:
        chats = await asyncio.to_thread(list_chats, store, session_figures_path(config.state_dir))
        rows = [
            [
                f'<a href="/chats/view?key={quote(chat.key, safe="")}">{e(chat.key)}</a>',
                e(chat.key.split(":", 1)[0] + (" (group)" if chat.group else "")),
                e(chat.messages),
                e(chat.last_active[:16].replace("T", " ")),
                e(f"{chat.consolidated} of {chat.messages}"),
                e(chat.owed or "-"),
            ]
            for chat in chats
        ]
        body = table(
            ["chat", "channel", "messages", "last active", "consolidated", "owed"],
            rows,
            "No conversations yet.",
        )
        return console.respond(request, "Chats", body)

    async def view(request: web.Request) -> web.Response:
        key = request.query.get("key", "")
        if key not in await asyncio.to_thread(store.keys):
            return console.respond(request, "Chat", f"<p>No chat {e(key)}.</p>", status=404)
        loaded = await asyncio.to_thread(read_session, store.path_for(key))
        messages = loaded.messages[-SHOWN:]
        skipped = len(loaded.messages) - len(messages)
        earlier = f"<p class=muted>{skipped} earlier messages not shown.</p>" if skipped else ""
        body = (
            '<p><a href="/chats">All chats</a> · read-only</p>'
            + earlier
            + "".join(_message(m) for m in messages)
        )
        return console.respond(request, key, body)

    return [web.get("/chats", show), web.get("/chats/view", view)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
        return "\n".join(parts)
    return "" if content is None else str(content)


def _message(message: dict[str, Any]) -> str:
    role = str(message.get("role", "?"))
    stamp = str(message.get("timestamp", ""))[:16].replace("T", " ")
    text = _text(message.get("content"))
    who = f'<span class="who">{e(role)} · {e(stamp)}</span>'
    if role == "tool":
        name = message.get("name") or message.get("tool_call_id") or "tool"
        return (
            f'<div class="message tool">{who}<details><summary>result of {e(name)}</summary>'
            f"<pre>{e(text)}</pre></details></div>"
        )
    calls = "".join(
        f"<details><summary>calls {e(call.get('function', {}).get('name', '?'))}</summary>"
        f"<pre>{e(_arguments(call))}</pre></details>"
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    )
    shown = f"<p>{e(text)}</p>" if text.strip() else ""
    return f'<div class="message {e(role)}">{who}{shown}{calls}</div>'


def _arguments(call: dict[str, Any]) -> str:
    raw = call.get("function", {}).get("arguments", "")
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(raw)
