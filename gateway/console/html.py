"""The console's HTML: the page around every view, forms that carry the CSRF token, Markdown and
diffs rendered with every piece of text escaped. No script, no inline style (the CSP forbids both)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from html import escape

NAV = (
    ("/memory", "Memory"),
    ("/history", "History"),
    ("/chats", "Chats"),
    ("/jobs", "Jobs"),
    ("/access", "Access"),
    ("/status", "Status"),
)


def e(text: object) -> str:
    """`text` escaped for HTML text and attribute values."""
    return escape(str(text), quote=True)


def page(title: str, body: str, *, current: str = "", note: str = "") -> str:
    """A whole page: the menu, an optional notice, then `body` (already HTML)."""
    links = "".join(
        f'<a href="{href}"{" aria-current=page" if href == current else ""}>{name}</a>'
        for href, name in NAV
    )
    notice = f'<p class="note" role="status">{e(note)}</p>' if note else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · memgate</title>"
        '<link rel="stylesheet" href="/static/console.css"></head><body>'
        f'<header><strong>memgate</strong><nav>{links}</nav></header><main id="main">'
        f"<h1>{e(title)}</h1>{notice}{body}</main></body></html>"
    )


def form(
    action: str, csrf: str, fields: dict[str, str], label: str, *, danger: bool = False
) -> str:
    """A one-button POST form carrying `fields` as hidden inputs and the session's CSRF token."""
    hidden = "".join(
        f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in fields.items()
    )
    css = ' class="danger"' if danger else ""
    return (
        f'<form method="post" action="{e(action)}" class="inline">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">{hidden}'
        f"<button{css}>{e(label)}</button></form>"
    )


def table(head: Iterable[str], rows: Iterable[Iterable[str]], empty: str) -> str:
    """A table of cells already HTML; `empty` (text) when there are no rows."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{e(empty)}</p>'
    titles = "".join(f"<th>{e(h)}</th>" for h in head)
    return f'<div class="scroll"><table><thead><tr>{titles}</tr></thead><tbody>{body}</tbody></table></div>'


_INLINE = (
    (re.compile(r"`([^`]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?!\w)"), r"<em>\1</em>"),
)
_MARKER = re.compile(r"^\s*<!--.*-->\s*$")


def _inline(text: str) -> str:
    html = e(text)
    for pattern, replacement in _INLINE:
        html = pattern.sub(replacement, html)
    return html


def markdown(text: str) -> str:
    """The Markdown memgate writes (headings, lists, paragraphs, code blocks, inline code and
    emphasis) as HTML; everything else is text. HTML in the source is shown, never run."""
    out: list[str] = []
    paragraph: list[str] = []
    in_list = in_code = False

    def flush() -> None:
        nonlocal in_list
        if paragraph:
            out.append("<p>" + "<br>".join(_inline(line) for line in paragraph) + "</p>")
            paragraph.clear()
        if in_list:
            out.append("</ul>")
            in_list = False

    for line in text.splitlines():
        if line.startswith("```"):
            flush()
            out.append("</code></pre>" if in_code else "<pre><code>")
            in_code = not in_code
        elif in_code:
            out.append(e(line) + "\n")
        elif _MARKER.match(line):
            continue  # memgate's own entry tags: invisible in Markdown, hidden here too
        elif heading := re.match(r"^(#{1,6})\s+(.*)$", line):
            flush()
            level = min(len(heading.group(1)) + 1, 6)  # the page's own title is the h1
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif item := re.match(r"^\s*[-*+]\s+(.*)$", line):
            if paragraph:
                flush()
            if not in_list:
                out.append("<ul>")
                in_list = True
            out.append(f"<li>{_inline(item.group(1))}</li>")
        elif not line.strip():
            flush()
        else:
            if in_list:
                flush()
            paragraph.append(line)
    flush()
    if in_code:
        out.append("</code></pre>")
    return '<div class="markdown">' + "".join(out) + "</div>"


def diff(before: str, after: str, before_name: str, after_name: str) -> str:
    """A unified diff of two texts, lines coloured by what happened to them."""
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), before_name, after_name, lineterm=""
        )
    )
    if not lines:
        return '<p class="empty">The two texts are the same.</p>'
    shown = []
    for line in lines:
        css = (
            "meta"
            if line.startswith(("---", "+++", "@@"))
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "same"
        )
        shown.append(f'<span class="{css}">{e(line)}</span>')
    return '<pre class="diff">' + "\n".join(shown) + "</pre>"
