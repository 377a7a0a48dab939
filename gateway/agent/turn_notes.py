"""What a streamed turn shows besides the answer: a note while tools run, the mark of a stopped one.

Pure functions of plain values; imports only `gateway.bus` of ours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from gateway.bus import STOPPED_MARK

# The -ing form people read while a tool works, for the tools memgate itself offers.
_DOING = {
    "read_file": "reading",
    "write_file": "writing",
    "edit_file": "editing",
    "list_dir": "looking in",
    "memory_get": "reading",
    "memory_search": "searching memory for",
}


# Shown in place of an answer the model's stream broke off, while it is asked again.
RESTART_NOTE = "the answer broke off; asking the model again…"


def mark_stopped(partial: str) -> str:
    """The answer as far as it got when /stop came, marked so nobody takes it for the whole."""
    return f"{partial.rstrip()}\n\n{STOPPED_MARK}"


def tool_note(calls: Iterable[tuple[str, str]]) -> str:
    """One line saying which tools are working, e.g. "reading notes.md…", from (name, JSON
    arguments) pairs; a tool of another kind (MCP, jobs) is named as it is."""
    notes = []
    for name, arguments in calls:
        doing = _DOING.get(name)
        subject = _subject(arguments)
        if doing is None:
            notes.append(f"running {name}")
        elif subject:
            notes.append(f"{doing} {subject}")
        else:
            notes.append(doing.removesuffix(" for").removesuffix(" in"))
    return ", ".join(dict.fromkeys(notes)) + "…" if notes else "working…"


def _subject(arguments: str) -> str:
    """The path or query the call names, shortened to fit a line; "" if it names none."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return ""
    if not isinstance(parsed, dict):
        return ""
    value = parsed.get("path") or parsed.get("query") or ""
    if not isinstance(value, str):
        return ""
    value = " ".join(value.split())
    return value if len(value) <= 60 else value[:59] + "…"
