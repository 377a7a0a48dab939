"""Who gets in: the one admission step every chat channel runs on each incoming message.

`decide` is pure: plain values in (the access rules, who sent what where), a `Decision` out. It
judges in one fixed order: the policy (DMs or groups at all), the allow-list (owner, guest through
`"*"` or pairing, or stranger), whether the message is addressed to the bot, and last `Gate` logs
the decision. Imports only `channels.errors` of ours; no SDK.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from channels.errors import AccessError as AccessError  # importable from here too
from channels.seen import Seen

log = logging.getLogger(__name__)

DM_POLICIES = ("pairing", "allowlist", "open", "disabled")
GROUP_POLICIES = ("mention", "open", "off")
DMS_DISABLED = "dms disabled"  # the reason of a DM dropped by dm_policy: disabled


class AccessSettings(Protocol):
    """The access keys every chat channel's config section has."""

    @property
    def allow_from(self) -> list[str]: ...

    @property
    def dm_policy(self) -> str: ...

    @property
    def group_policy(self) -> str: ...


class Verdict(enum.Enum):
    """What a channel does with one incoming message."""

    ADMIT = "admit"  # hand it to the agent
    IGNORE = "ignore"  # drop it silently (not for us, or DMs are off)
    REFUSE = "refuse"  # drop it and log the stranger once
    PAIR = "pair"  # a stranger's DM: answer with a pairing code, store nothing


class AllowList:
    """Who may talk to the bot: ids or @usernames, `"*"` for everyone, empty for nobody."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.everyone = False
        self._ids: set[str] = set()
        self._names: set[str] = set()
        for raw in entries:
            entry = str(raw).strip()
            if entry == "*":
                self.everyone = True
            elif entry.startswith("@"):
                self._names.add(entry[1:].lower())
            elif entry:
                self._ids.add(entry)

    def allows(self, sender_id: str, username: str | None = None) -> bool:
        return self.everyone or self.is_owner(sender_id, username)

    def is_owner(self, sender_id: str, username: str | None = None) -> bool:
        """Listed by id or @name: an owner. `"*"` lets everyone in, but only as a guest."""
        if sender_id in self._ids:
            return True
        return username is not None and username.lstrip("@").lower() in self._names


@dataclass(frozen=True, slots=True)
class Rules:
    """A channel's access settings, checked on construction (AccessError names the key)."""

    channel: str
    allow: AllowList
    dm_policy: str = "allowlist"
    group_policy: str = "mention"

    @classmethod
    def build(
        cls,
        channel: str,
        allow_from: Iterable[str],
        dm_policy: str,
        group_policy: str,
        *,
        pairing: bool,
    ) -> Rules:
        allow_from = [str(entry).strip() for entry in allow_from]
        check_access(channel, allow_from, dm_policy, group_policy, pairing=pairing)
        return cls(channel, AllowList(allow_from), dm_policy, group_policy)


@dataclass(frozen=True, slots=True)
class Request:
    """One incoming message as admission sees it.

    `username` only where the platform's names cannot be taken over (Telegram), else None;
    `approved`: let in by pairing (it opens DMs only, never a group); `for_another_bot`: a group
    command addressed to some other bot (`/help@otherbot`).
    """

    sender_id: str
    username: str | None = None
    name: str = ""  # what they call themselves: the log line, a stranger's pairing code
    is_group: bool = False
    addressed: bool = False
    approved: bool = False
    for_another_bot: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict, whether the sender is an owner (private scope, may /pair), and why."""

    verdict: Verdict
    owner: bool
    reason: str


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


def decide(rules: Rules, request: Request) -> Decision:
    """The one admission rule, in its fixed order: policy, allow-list, mention.

    A stranger in a group who does not address the bot is ignored, not refused: only strangers
    who talk to the bot are logged, not everyone chatting in a group it sits in.
    """
    owner = rules.allow.is_owner(request.sender_id, request.username)
    # 1. Policy: are DMs, or groups, served at all?
    if request.is_group and rules.group_policy == "off":
        return Decision(Verdict.IGNORE, owner, "groups off")
    if not request.is_group and rules.dm_policy == "disabled":
        return Decision(Verdict.IGNORE, owner, DMS_DISABLED)
    # 2. Allow-list: an owner, a guest (through "*", an open DM policy or pairing), or a stranger.
    listed = owner or rules.allow.everyone
    if request.is_group:
        allowed = listed
    else:
        # Approvals outlive a switch from pairing to allowlist: it stops new codes, not old guests.
        allowed = listed or rules.dm_policy == "open" or request.approved
    # 3. Mention: in a group, only what is addressed to us (all of it under the open policy).
    if request.is_group and request.for_another_bot:
        return Decision(Verdict.IGNORE, owner, "for another bot")
    if request.is_group and rules.group_policy == "mention" and not request.addressed:
        return Decision(Verdict.IGNORE, owner, "not mentioned")
    if allowed:
        return Decision(Verdict.ADMIT, owner, "owner" if owner else "guest")
    if not request.is_group and rules.dm_policy == "pairing":
        return Decision(Verdict.PAIR, owner, "stranger, pairing")
    return Decision(Verdict.REFUSE, owner, "not in allow_from")


class Gate:
    """A channel's admission step: `decide` on its current rules, then the decision logged.

    The decision goes to DEBUG; a refused stranger once at WARNING with what the owner must add;
    an owner's DM dropped because DMs are disabled at INFO, each time (never a message's text).
    """

    def __init__(
        self,
        channel: str,
        allow_from: Iterable[str],
        dm_policy: str,
        group_policy: str,
        *,
        approvals: Callable[[str, str], bool] | None = None,
    ) -> None:
        """`approvals(channel, sender_id)` says whether pairing let a sender in; None: no pairing."""
        self._approvals = approvals
        self._refused = Seen()  # senders logged as refused: each is logged once, not per message
        pairing = approvals is not None
        self.rules = Rules.build(channel, allow_from, dm_policy, group_policy, pairing=pairing)

    @classmethod
    def from_settings(
        cls, channel: str, settings: AccessSettings, approvals: Callable[[str, str], bool] | None
    ) -> Gate:
        """The gate of a channel's config section (its allow_from and policies)."""
        return cls(
            channel,
            settings.allow_from,
            settings.dm_policy,
            settings.group_policy,
            approvals=approvals,
        )

    def set_rules(self, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        """Judge the next message by these settings (a reload); AccessError leaves the old ones."""
        pairing = self._approvals is not None
        channel = self.rules.channel
        self.rules = Rules.build(channel, allow_from, dm_policy, group_policy, pairing=pairing)

    def judge(self, request: Request) -> Decision:
        channel = self.rules.channel
        if not request.is_group and self._approvals is not None:
            # Pairing opens DMs only, so only a DM asks the store (one stat of its file).
            approved = self._approvals(channel, request.sender_id)
            request = replace(request, approved=approved)
        decision = decide(self.rules, request)
        log.debug(
            "admission channel=%s sender_id=%s group=%s verdict=%s reason=%s",
            channel,
            request.sender_id,
            request.is_group,
            decision.verdict.value,
            decision.reason,
        )
        if decision.reason == DMS_DISABLED and decision.owner:
            # The owner wonders why the bot is silent; a stranger's DM stays at DEBUG (no flood).
            log.info(
                "dm dropped channel=%s sender_id=%s reason=dm_policy_disabled "
                "(set channels.%s.dm_policy to allowlist or pairing to be answered in DMs)",
                channel,
                request.sender_id,
                channel,
            )
        if decision.verdict is Verdict.REFUSE and not self._refused.check(request.sender_id):
            log.warning(
                "refused sender channel=%s sender_id=%s username=%s "
                "(add the id to channels.%s.allow_from to let them in)",
                channel,
                request.sender_id,
                request.username or request.name or "-",
                channel,
            )
        return decision

    def is_owner(self, sender_id: str, username: str | None = None) -> bool:
        return self.rules.allow.is_owner(sender_id, username)
