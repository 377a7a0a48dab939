"""What every channel shares: the `Channel` protocol, its commands and the one parser of a
command's text (the agent's as well), reply splitting.

Imports `gateway.bus` and `channels.errors` of ours.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from channels.errors import ChannelConfigError as ChannelConfigError  # the CLI imports it here
from gateway.bus import Handler, OutboundMessage


class Channel(Protocol):
    """A platform connection; `run()` serves until cancelled, handing messages to the handler."""

    name: str

    async def run(self) -> None: ...

    async def send(self, message: OutboundMessage) -> bool:
        """Send a message to a chat (a reply, or one nobody asked for: a reminder); True when
        the platform took all of it. Failures are logged, not raised."""
        ...

    @property
    def connected(self) -> bool: ...

    @property
    def ready(self) -> asyncio.Event:
        """Set while connected, for whoever must wait for the connection before sending."""
        ...


ChannelFactory = Callable[[Handler], Channel]


@dataclass(frozen=True, slots=True)
class ChatCommands:
    """What a platform's command menu offers, (name, description) each, and the greeting for a
    first contact (Telegram's /start); the gateway builds both from its command registry."""

    menu: tuple[tuple[str, str], ...] = ()
    greeting: str = ""


@dataclass(frozen=True, slots=True)
class Command:
    """A command's name (lower case, without `/` or `@bot`) and what follows it."""

    name: str
    args: str


def parse_command(text: str) -> Command | None:
    """`/New@MyBot extra` → Command("new", "extra"); anything not starting with `/` → None.

    The one reading of a command, for the channels' own (/pair, /start) and the agent's alike:
    platforms send whatever capitalisation the person typed, and Telegram may add `@botname`.
    """
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2 or stripped[1].isspace():
        return None
    head, *rest = stripped[1:].split(maxsplit=1)
    args = rest[0] if rest else ""
    name = head.split("@", 1)[0].lower()
    if not name.isidentifier():
        return None
    return Command(name, args.strip())


# A fence line: its marker and the info string after it (CommonMark).
FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")


def text_length(text: str) -> int:
    """Length in Python characters (Discord counts these)."""
    return len(text)


def split_message(text: str, limit: int, measure: Callable[[str], int] = text_length) -> list[str]:
    """Split `text` into pieces each at most `limit` long by `measure`.

    Cuts prefer a paragraph break, then a line break, then a space; a piece that ends inside a
    fenced code block is closed with a fence and the next piece reopens it with the same info
    string. Characters are never cut apart, so surrogate pairs and emoji survive.
    """
    if limit < 64:
        # Room for a reopened fence line, a closing fence and some text; every platform allows
        # far more (Telegram 4096, Discord 2000).
        raise ValueError(f"limit {limit} too small to split into fenced pieces (minimum 64)")
    if measure(text) <= limit:
        return [text] if text else []
    pieces: list[str] = []
    reopen = ""  # fence line that must open the next piece, e.g. "```python\n"
    rest = text
    while rest:
        body_limit = limit - measure(reopen)
        if measure(rest) <= body_limit:
            pieces.append(reopen + rest)
            break
        # Leave room for a closing fence in case the cut lands inside a block.
        cut = _find_cut(rest, body_limit - 4, measure)
        head, rest = rest[:cut], rest[cut:]
        fence = _open_fence(reopen + head)
        piece = reopen + head
        if fence is not None:
            piece = piece.rstrip("\n") + "\n" + fence[0]
            reopen = fence[0] + fence[1] + "\n"
            rest = rest.lstrip("\n")
        else:
            reopen = ""
            piece = piece.rstrip()
            rest = rest.lstrip("\n ")
        if piece.strip():
            pieces.append(piece)
    return [p for p in pieces if p.strip()]


def _find_cut(text: str, budget: int, measure: Callable[[str], int]) -> int:
    """Index at which to cut so that `text[:index]` fits `budget`, at the best boundary."""
    # Largest prefix that fits, found by bisection on characters (measure is monotonic).
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if measure(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    fit = lo
    window = text[:fit]
    floor = fit // 2  # don't accept a boundary that wastes more than half a piece
    for sep in ("\n\n", "\n", " "):
        at = window.rfind(sep)
        if at > floor:
            return at + len(sep)
    return fit


def _open_fence(text: str) -> tuple[str, str] | None:
    """The (fence, info) of a code block left open at the end of `text`, else None."""
    open_fence: tuple[str, str] | None = None
    for line in text.split("\n"):
        match = FENCE.match(line)
        if not match:
            continue
        marker, info = match.group(1), match.group(2).strip()
        if marker[0] == "`" and "`" in info:
            continue  # "```x```" on one line is inline code, not a fence (CommonMark)
        if len(marker) > 16 or len(info) > 64:
            continue  # too long to repeat in every piece; split it as plain text
        if open_fence is None:
            open_fence = (marker, info)
        elif marker.startswith(open_fence[0][0]) and len(marker) >= len(open_fence[0]) and not info:
            open_fence = None
    return open_fence
