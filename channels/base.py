"""What every channel shares: the `Channel` protocol, who gets in (`admit`) and reply splitting.

Imports only `gateway.bus` of ours.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Iterable
from typing import Protocol

from gateway.bus import Handler, OutboundMessage

log = logging.getLogger(__name__)


class ChannelConfigError(Exception):
    """The platform refuses this configuration (bad token, missing intent); retrying won't help."""


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


ChannelFactory = Callable[[Handler], Channel]


class AllowList:
    """Who may talk to the bot: ids or @usernames, `"*"` for everyone, empty for nobody."""

    def __init__(self, entries: Iterable[str]) -> None:
        self._everyone = False
        self._ids: set[str] = set()
        self._names: set[str] = set()
        for raw in entries:
            entry = str(raw).strip()
            if entry == "*":
                self._everyone = True
            elif entry.startswith("@"):
                self._names.add(entry[1:].lower())
            elif entry:
                self._ids.add(entry)
        self._refused: set[str] = set()

    def allows(self, sender_id: str, username: str | None = None) -> bool:
        return self._everyone or self.is_owner(sender_id, username)

    def is_owner(self, sender_id: str, username: str | None = None) -> bool:
        """Listed by id or @name: an owner. `"*"` lets everyone in, but only as a guest."""
        if sender_id in self._ids:
            return True
        return username is not None and username.lstrip("@").lower() in self._names

    def note_refused(self, channel: str, sender_id: str, username: str | None = None) -> None:
        """Log a stranger once, with what the owner must add to `allow_from`."""
        if sender_id in self._refused:
            return
        self._refused.add(sender_id)
        log.warning(
            "refused sender channel=%s sender_id=%s username=%s "
            "(add the id to channels.%s.allow_from to let them in)",
            channel,
            sender_id,
            username or "-",
            channel,
        )


DM_POLICIES = ("pairing", "allowlist", "open", "disabled")
GROUP_POLICIES = ("mention", "open", "off")


class AccessError(ChannelConfigError, ValueError):
    """An access setting the channel cannot serve (an unknown policy, `open` without `"*"`)."""


class Verdict(enum.Enum):
    """What a channel does with one incoming message."""

    ADMIT = "admit"  # hand it to the agent
    IGNORE = "ignore"  # drop it silently (not for us, or DMs are off)
    REFUSE = "refuse"  # drop it and log the stranger once
    PAIR = "pair"  # a stranger's DM: answer with a pairing code, store nothing


def check_access(
    channel: str, allow_from: Iterable[str], dm_policy: str, group_policy: str, *, pairing: bool
) -> None:
    """Raise AccessError naming the key when these settings cannot be served."""
    if dm_policy not in DM_POLICIES:
        raise AccessError(
            f"channels.{channel}.dm_policy: {dm_policy!r} is not one of {', '.join(DM_POLICIES)}"
        )
    if group_policy not in GROUP_POLICIES:
        raise AccessError(
            f"channels.{channel}.group_policy: {group_policy!r} is not one of "
            f"{', '.join(GROUP_POLICIES)}"
        )
    if dm_policy == "open" and "*" not in {str(entry).strip() for entry in allow_from}:
        raise AccessError(
            f'channels.{channel}.dm_policy: open lets anyone in, so it needs allow_from: ["*"]'
        )
    if dm_policy == "pairing" and not pairing:
        raise AccessError(f"channels.{channel}.dm_policy: pairing needs the pairing store")


def admit(
    *,
    is_group: bool,
    dm_policy: str,
    group_policy: str,
    listed: bool,
    approved: bool,
    addressed: bool,
    for_another_bot: bool = False,
) -> Verdict:
    """The one admission rule every channel applies, on plain values.

    `listed`: in allow_from (an owner, or anyone through `"*"`); `approved`: let in by pairing,
    which opens DMs only, never a group. The group policy comes first, so only strangers who
    address the bot are logged, not everyone chatting in a group it sits in.
    """
    if is_group:
        if (
            for_another_bot
            or group_policy == "off"
            or (group_policy == "mention" and not addressed)
        ):
            return Verdict.IGNORE
        return Verdict.ADMIT if listed else Verdict.REFUSE
    if dm_policy == "disabled":
        return Verdict.IGNORE
    if listed or dm_policy == "open":
        return Verdict.ADMIT
    if approved:
        # Approvals outlive a switch from pairing to allowlist: it stops new codes, not old guests.
        return Verdict.ADMIT
    return Verdict.PAIR if dm_policy == "pairing" else Verdict.REFUSE


def is_pair_command(text: str) -> bool:
    """`/pair` or `/pair CODE`, as an owner approves a stranger from their own chat."""
    return text.split(maxsplit=1)[:1] == ["/pair"]


_FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")


def text_length(text: str) -> int:
    """Length in Python characters (Discord counts these)."""
    return len(text)


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units (Telegram counts these)."""
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


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
        match = _FENCE.match(line)
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
