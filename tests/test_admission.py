"""The admission step on plain values: policy, allow-list, mention, then the logged decision."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from channels.admission import (
    AccessError,
    AllowList,
    Decision,
    Gate,
    Request,
    Rules,
    Verdict,
    decide,
)
from channels.base import Command
from channels.pairing import PairingStore
from channels.reception import Reception
from gateway.config.models import TelegramConfig


def rules(
    allow_from: list[str], dm_policy: str = "allowlist", group_policy: str = "mention"
) -> Rules:
    return Rules.build("telegram", allow_from, dm_policy, group_policy, pairing=True)


def test_username_listed_admits_that_name_only() -> None:
    """An @name in allow_from admits that username (any case), never a sender with another name."""
    allow = rules(["@alice"])
    assert decide(allow, Request("7", username="Alice")).verdict is Verdict.ADMIT
    assert decide(allow, Request("7", username="@alice")).verdict is Verdict.ADMIT
    refused = decide(allow, Request("7", username="bob"))
    assert refused.verdict is Verdict.REFUSE and not refused.owner
    assert decide(allow, Request("7", username="alice_")).verdict is Verdict.REFUSE
    assert decide(allow, Request("7")).verdict is Verdict.REFUSE


def test_an_id_listed_is_not_matched_as_a_username() -> None:
    """A username that spells a listed id is no owner: ids match ids, @names match usernames."""
    allow = rules(["12345"])
    assert decide(allow, Request("7", username="12345")).verdict is Verdict.REFUSE
    assert decide(allow, Request("12345", username="bob")).owner


def test_star_admits_everyone_as_a_guest_never_an_owner() -> None:
    """`"*"` lets a stranger in as a guest; only listed ids or names are owners."""
    decision = decide(rules(["*", "42"]), Request("99", username="mallory"))
    assert decision.verdict is Verdict.ADMIT and not decision.owner
    assert decide(rules(["*", "42"]), Request("42")).owner


def test_policy_comes_first() -> None:
    """groups off and DMs disabled ignore even an owner who addresses the bot."""
    assert decide(rules(["42"], group_policy="off"), Request("42", is_group=True, addressed=True)).verdict is Verdict.IGNORE  # fmt: skip
    assert decide(rules(["42"], dm_policy="disabled"), Request("42")).verdict is Verdict.IGNORE


def test_group_stranger_is_refused_only_when_addressing_the_bot() -> None:
    """Unaddressed group chatter is ignored, an owner's too; a stranger who mentions it is refused."""
    allow = rules(["42"])
    assert decide(allow, Request("42", is_group=True)).verdict is Verdict.IGNORE
    assert decide(allow, Request("7", is_group=True)).verdict is Verdict.IGNORE
    assert decide(allow, Request("7", is_group=True, addressed=True)).verdict is Verdict.REFUSE
    assert decide(allow, Request("42", is_group=True, addressed=True)).verdict is Verdict.ADMIT
    open_group = rules(["42"], group_policy="open")
    assert decide(open_group, Request("42", is_group=True)).verdict is Verdict.ADMIT
    assert decide(open_group, Request("7", is_group=True)).verdict is Verdict.REFUSE


def test_a_command_for_another_bot_is_ignored_even_from_an_owner() -> None:
    """`/help@otherbot` in a group belongs to that bot, whatever the policy."""
    request = Request("42", is_group=True, addressed=True, for_another_bot=True)
    assert decide(rules(["42"], group_policy="open"), request).verdict is Verdict.IGNORE


def test_pairing_opens_dms_only() -> None:
    """An approved sender gets in by DM under pairing or allowlist, never in a group."""
    for policy in ("pairing", "allowlist"):
        assert decide(rules([], dm_policy=policy), Request("7", approved=True)).verdict is Verdict.ADMIT  # fmt: skip
    assert decide(rules([], dm_policy="pairing"), Request("7")).verdict is Verdict.PAIR
    group = Request("7", is_group=True, addressed=True, approved=True)
    assert decide(rules([], dm_policy="pairing"), group).verdict is Verdict.REFUSE


def test_bad_rules_name_the_key() -> None:
    """An unknown policy, or open DMs without "*", is an AccessError naming the key."""
    with pytest.raises(AccessError, match=r"channels\.telegram\.group_policy: 'some'"):
        rules(["42"], group_policy="some")
    with pytest.raises(AccessError, match=r"channels\.telegram\.dm_policy: open"):
        rules(["42"], dm_policy="open")
    with pytest.raises(AccessError, match="pairing needs the pairing store"):
        Rules.build("discord", [], "pairing", "mention", pairing=False)


def test_gate_logs_a_refused_stranger_once(caplog: pytest.LogCaptureFixture) -> None:
    """The gate logs each refused sender once at WARNING, with the key to add them to."""
    gate = Gate("telegram", ["42"], "allowlist", "mention")
    with caplog.at_level(logging.DEBUG, logger="channels.admission"):
        for _ in range(3):
            assert gate.judge(Request("7", username="bob")).verdict is Verdict.REFUSE
        gate.judge(Request("42"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "refused sender channel=telegram sender_id=7 username=bob "
        "(add the id to channels.telegram.allow_from to let them in)"
    ]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert debug[-1] == (
        "admission channel=telegram sender_id=42 group=False verdict=admit reason=owner"
    )


def test_an_owners_dm_dropped_by_disabled_dms_is_logged_each_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """dm_policy disabled: each DM of an owner dropped is one INFO line naming the policy (a
    stranger's stays at DEBUG, so strangers cannot flood the log); groups are served."""
    gate = Gate("discord", ["42"], "disabled", "mention")
    with caplog.at_level(logging.INFO, logger="channels.admission"):
        for _ in range(2):
            assert gate.judge(Request("42")).verdict is Verdict.IGNORE
        assert gate.judge(Request("7")).verdict is Verdict.IGNORE
        assert gate.judge(Request("42", is_group=True, addressed=True)).verdict is Verdict.ADMIT
    line = (
        "dm dropped channel=discord sender_id=42 reason=dm_policy_disabled "
        "(set channels.discord.dm_policy to allowlist or pairing to be answered in DMs)"
    )
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.INFO, line)] * 2


def test_allow_list_entries_are_trimmed_and_empty_ones_dropped() -> None:
    """Blank entries admit nobody; surrounding spaces do not stop a match."""
    allow = AllowList([" 42 ", "", " @Carol "])
    assert allow.is_owner("42") and allow.is_owner("9", "carol")
    assert not allow.allows("") and not allow.everyone


def test_new_rules_apply_to_the_next_message_and_bad_ones_change_nothing() -> None:
    """A reload's settings judge the next message; a bad reload keeps the rules in force."""
    gate = Gate("discord", ["42"], "allowlist", "mention")
    assert gate.judge(Request("7")).verdict is Verdict.REFUSE
    gate.set_rules(["7"], "allowlist", "mention")
    assert gate.judge(Request("7")).verdict is Verdict.ADMIT
    with pytest.raises(AccessError, match="pairing needs the pairing store"):
        gate.set_rules(["42"], "pairing", "mention")
    assert gate.judge(Request("7")).verdict is Verdict.ADMIT


def test_gate_asks_the_pairing_store_for_dms_only() -> None:
    """An approved stranger gets in by DM; a group never asks the store and stays closed."""
    asked: list[tuple[str, str]] = []

    def approvals(channel: str, sender_id: str) -> bool:
        asked.append((channel, sender_id))
        return sender_id == "7"

    gate = Gate("telegram", [], "pairing", "open", approvals=approvals)
    assert gate.judge(Request("7")).verdict is Verdict.ADMIT
    assert gate.judge(Request("8")).verdict is Verdict.PAIR
    assert gate.judge(Request("7", is_group=True)).verdict is Verdict.REFUSE
    assert asked == [("telegram", "7"), ("telegram", "8")]


def pairing_reception(store: PairingStore) -> Reception:
    """Owner 42, pairing for strangers, groups by mention."""
    return Reception("telegram", TelegramConfig(allow_from=["42"], dm_policy="pairing"), store)


async def test_reception_gives_a_stranger_one_code_and_lets_an_owner_pair(tmp_path: Path) -> None:
    """A stranger's DMs get one code; an owner's /PAIR in a DM approves it; in a group, a turn."""
    store = PairingStore(tmp_path)
    reception = pairing_reception(store)
    stranger = Request("666", name="Mallory")
    first = reception.step(stranger, reception.judge(stranger), "hi")
    again = reception.step(stranger, reception.judge(stranger), "hello?")
    [pending] = store.pending("telegram")
    assert first.reply is not None and pending.code in first.reply and pending.name == "Mallory"
    assert (again.reply, again.pair, again.turn) == (None, False, False)
    owner = Request("42")
    decision = reception.judge(owner)
    step = reception.step(owner, decision, f"/PAIR {pending.code}")
    assert step.pair and not step.turn
    assert "Approved Mallory" in await reception.answer_pair(
        owner, decision, f"/pair {pending.code}"
    )
    assert reception.judge(stranger).verdict is Verdict.ADMIT
    group = Request("42", is_group=True, addressed=True)
    in_group = reception.step(group, reception.judge(group), "/pair")
    assert in_group.turn and in_group.command == Command("pair", "")


def test_a_pairing_store_the_disk_refuses_costs_only_the_strangers_reply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The state folder unusable (an OSError): the stranger gets no reply, one error line says
    why, and nothing is raised into the channel."""
    (tmp_path / "file").write_text("")
    reception = pairing_reception(PairingStore(tmp_path / "file" / "state"))
    stranger = Decision(Verdict.PAIR, owner=False, reason="stranger, pairing")
    step = reception.step(Request("666"), stranger, "hi")
    assert (step.reply, step.pair, step.turn) == (None, False, False)
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "pairing failed channel=telegram sender_id=666" in error.getMessage()
