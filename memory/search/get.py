"""`memory_get`: numbered lines of a file under memory/ or sessions/, with its path checks.

A path is taken relative to the workspace, symlinks are followed and the result must stay inside
memory/ or sessions/ (resolved real paths, so no `..` or link escapes). Session lines are shown as
`[date] role: text` rather than JSON.
"""

from __future__ import annotations

import json
from datetime import datetime, tzinfo
from itertools import islice
from pathlib import Path, PurePosixPath

from memory.budget import TOOL_RESULT_CHARS
from memory.errors import SearchPathError
from memory.search.sources import is_inside, roots

DEFAULT_LINES = 40
MAX_LINES = 200
MAX_GET_CHARS = 12_000
MAX_LINE_CHARS = 2_000


def resolve_path(workspace: Path, raw: object) -> Path:
    """A workspace-relative path to a file under memory/ or sessions/, symlinks followed; else raise."""
    if not isinstance(raw, str) or not raw.strip():
        raise SearchPathError("path must be a non-empty string, e.g. memory/HISTORY.md")
    text = raw.strip()
    relative = PurePosixPath(text.replace("\\", "/"))
    if "\x00" in text or relative.is_absolute() or text.startswith("~"):
        raise SearchPathError(
            f"{text!r}: give the path relative to the workspace, as search shows it"
        )
    if ".." in relative.parts:
        raise SearchPathError(f"{text!r}: '..' is not allowed")
    try:
        resolved = (workspace / relative).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise SearchPathError(f"{text!r} cannot be resolved ({exc})") from exc
    if not is_inside(resolved, roots(workspace)):
        raise SearchPathError(f"{text!r} is outside memory/ and sessions/")
    if not resolved.is_file():
        raise SearchPathError(f"no such file: {text}")
    return resolved


def read_lines(workspace: Path, raw: object, from_line: int, count: int, tz: tzinfo) -> str:
    """Numbered lines of a memory or session file; session lines are shown as `[date] role: text`."""
    path = resolve_path(workspace, raw)
    shown_as = str(raw).strip()
    from_line, count = max(1, from_line), max(1, min(count, MAX_LINES))
    session = path.suffix == ".jsonl"
    out: list[str] = []
    size = 0
    last = from_line - 1
    more = False
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        window = islice(handle, from_line - 1, from_line - 1 + count)
        for number, raw_line in enumerate(window, start=from_line):
            text = raw_line.rstrip("\r\n")
            text = render_session_line(text, tz) if session else text
            if len(text) > MAX_LINE_CHARS:
                text = f"{text[:MAX_LINE_CHARS]}… [{len(text) - MAX_LINE_CHARS} more characters]"
            if out and size + len(text) > MAX_GET_CHARS:
                more = True
                break
            out.append(f"{number}: {text}")
            size += len(text)
            last = number
        if not more and last == from_line - 1 + count:
            more = handle.readline() != ""
    if not out:
        return f"{shown_as} has fewer than {from_line} lines."
    header = f"{shown_as} lines {from_line}-{last}"
    if more:
        header += f" (more below: from_line={last + 1})"
    return header + "\n" + "\n".join(out)


def render_session_line(text: str, tz: tzinfo) -> str:
    """A JSONL session line as a person would read it."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the decoder recurses
        return text
    if not isinstance(record, dict):
        return text
    kind = record.get("_type")
    if kind == "metadata":
        return f"(session {record.get('key', '?')}, started {record.get('created_at', '?')})"
    if kind == "consolidated":
        return (
            f"(the first {record.get('last_consolidated')} messages are consolidated into memory)"
        )
    stamp = ""
    if isinstance(record.get("timestamp"), str):
        try:
            moment = datetime.fromisoformat(record["timestamp"])
            moment = moment.astimezone(tz) if moment.tzinfo else moment
            stamp = moment.strftime("[%Y-%m-%d %H:%M] ")
        except ValueError:
            pass
    role = record.get("role", "?")
    content = record.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    content = content if isinstance(content, str) else ""
    if role == "tool":
        short = content[:TOOL_RESULT_CHARS] + ("…" if len(content) > TOOL_RESULT_CHARS else "")
        return f"{stamp}tool result ({record.get('name', '?')}): {short}"
    calls = record.get("tool_calls") or []
    names = [c.get("function", {}).get("name", "?") for c in calls if isinstance(c, dict)]
    if names and not content.strip():
        return f"{stamp}{role} called {', '.join(names)}"
    return f"{stamp}{role}: {content}"
