"""Pairing on plain values: the admission rule, the codes, and the store in a real state folder."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from channels.admission import AccessError, AllowList, Request, Rules, Verdict, check_access, decide
from channels.pairing import (
    CODE_TTL,
    REPLY_EVERY,
    Answer,
    PairingError,
    PairingStore,
    new_code,
    pair_command,
)
from gateway.bus import InboundMessage
from gateway.tools.scope import GROUP, PRIVATE, scope_for

CODE = re.compile(r"^[A-HJ-NP-Z2-9]{8}$")


class Clock:
    """Epoch seconds the test moves by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def verdict(
    *,
    is_group: bool = False,
    dm_policy: str = "pairing",
    group_policy: str = "mention",
    listed: bool = False,
    approved: bool = False,
    addressed: bool = False,
    for_another_bot: bool = False,
) -> Verdict:
    rules = Rules("telegram", AllowList(["42"]), dm_policy, group_policy)
    sender = "42" if listed else "7"
    request = Request(
        sender,
        is_group=is_group,
        addressed=addressed,
        approved=approved,
        for_another_bot=for_another_bot,
    )
    return decide(rules, request).verdict


def test_dm_verdicts_follow_the_policy() -> None:
    """A stranger's DM: a code under pairing, refused under allowlist, in under open, off when disabled."""
    assert verdict(dm_policy="pairing") is Verdict.PAIR
    assert verdict(dm_policy="allowlist") is Verdict.REFUSE
    assert verdict(dm_policy="open") is Verdict.ADMIT
    assert verdict(dm_policy="disabled") is Verdict.IGNORE
    assert verdict(dm_policy="disabled", listed=True) is Verdict.IGNORE
    assert verdict(dm_policy="pairing", listed=True) is Verdict.ADMIT
    assert verdict(dm_policy="pairing", approved=True) is Verdict.ADMIT
    assert verdict(dm_policy="allowlist", approved=True) is Verdict.ADMIT


def test_approval_never_opens_a_group() -> None:
    """An approved DM sender who is not in allow_from is refused in a group, even when addressed."""
    assert verdict(is_group=True, approved=True, addressed=True) is Verdict.REFUSE
    assert verdict(is_group=True, approved=True, group_policy="open") is Verdict.REFUSE
    assert verdict(is_group=True, listed=True, addressed=True) is Verdict.ADMIT


def test_group_policy_comes_before_the_sender() -> None:
    """Unaddressed group chatter is ignored, not logged as a refusal; off ignores even owners."""
    assert verdict(is_group=True, addressed=False) is Verdict.IGNORE
    assert verdict(is_group=True, listed=True, group_policy="off", addressed=True) is Verdict.IGNORE
    assert verdict(is_group=True, listed=True, addressed=True, for_another_bot=True) is (
        Verdict.IGNORE
    )


def test_open_dms_need_everyone_in_allow_from() -> None:
    """dm_policy open without "*" is refused with the key named; an unknown policy too."""
    with pytest.raises(AccessError, match=r"channels\.telegram\.dm_policy: open"):
        check_access("telegram", ["42"], "open", "mention", pairing=True)
    with pytest.raises(AccessError, match="'maybe' is not one of"):
        check_access("discord", ["42"], "maybe", "mention", pairing=True)
    check_access("telegram", ["*"], "open", "mention", pairing=False)


def test_codes_avoid_look_alikes() -> None:
    """Codes are 8 characters without 0, O, 1 or I."""
    codes = {new_code() for _ in range(500)}
    assert all(CODE.match(code) for code in codes)
    assert len(codes) == 500


def test_same_sender_gets_the_same_code_and_one_reply_per_ten_minutes(tmp_path: Path) -> None:
    """Within 10 minutes: same code, no reply, no write; after 10 minutes: the same code again."""
    clock = Clock()
    store = PairingStore(tmp_path / "state", clock)
    first = store.request("telegram", "666", "Mallory")
    assert first.reply and first.code and CODE.match(first.code)
    written = (tmp_path / "state" / "pairing.json").stat()
    clock.now += REPLY_EVERY - 1
    again = store.request("telegram", "666", "Mallory")
    assert (again.code, again.reply) == (first.code, False)
    kept = (tmp_path / "state" / "pairing.json").stat()
    assert (kept.st_ino, kept.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # no write
    clock.now += 1
    later = store.request("telegram", "666", "Mallory")
    assert (later.code, later.reply) == (first.code, True)


def test_a_fourth_pending_sender_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three codes may wait per channel; a fourth stranger gets none and one log line."""
    store = PairingStore(tmp_path / "state", Clock())
    for sender in ("1", "2", "3"):
        assert store.request("telegram", sender).code
    assert store.request("telegram", "4").code is None
    assert store.request("telegram", "4").code is None
    refused = [r for r in caplog.records if "pairing refused" in r.getMessage()]
    assert len(refused) == 1 and "sender_id=4" in refused[0].getMessage()
    assert store.request("discord", "4").code  # another channel has its own three


def test_an_expired_code_is_refused(tmp_path: Path) -> None:
    """A code an hour old cannot be approved; the sender is not let in."""
    clock = Clock()
    store = PairingStore(tmp_path / "state", clock)
    code = store.request("telegram", "666").code
    assert code
    clock.now += CODE_TTL - 1
    assert [p.code for p in store.pending()] == [code]  # still valid a second before the hour
    clock.now += 1
    with pytest.raises(PairingError, match="expired"):
        store.approve(code, "cli")
    assert not store.is_approved("telegram", "666")
    assert store.pending() == []


def test_approve_and_revoke_are_kept_in_the_state_folder(tmp_path: Path) -> None:
    """Approval records who and when in an owner-only file; another store sees it; revoke undoes it."""
    clock = Clock()
    state = tmp_path / "state"
    service, cli = PairingStore(state, clock), PairingStore(state, clock)
    code = service.request("telegram", "666", "Mallory").code
    assert code and not service.is_approved("telegram", "666")
    approved = cli.approve(code.lower(), "cli")
    assert (approved.address, approved.approved_by) == ("telegram:666", "cli")
    assert service.is_approved("telegram", "666")
    assert not service.is_approved("discord", "666")
    saved = json.loads((state / "pairing.json").read_text())
    assert saved["approved"][0]["name"] == "Mallory"
    assert saved["approved"][0]["approved_at"].startswith("2027-01-15T08:00:00")
    assert stat.S_IMODE((state / "pairing.json").stat().st_mode) == 0o600
    cli.revoke("telegram:666")
    assert not service.is_approved("telegram", "666")
    with pytest.raises(PairingError, match="not an approved sender"):
        cli.revoke("telegram:666")
    with pytest.raises(PairingError, match="CHANNEL:ID"):
        cli.revoke("666")


def test_reject_frees_a_slot_and_holds_the_sender_back_for_an_hour(tmp_path: Path) -> None:
    """A rejected code frees its place at once; its sender gets no new code until the hour is up."""
    clock = Clock()
    store = PairingStore(tmp_path / "state", clock)
    codes = [store.request("telegram", sender).code for sender in ("1", "2", "3")]
    assert all(codes) and store.request("telegram", "4").code is None
    rejected = store.reject(str(codes[0]).lower())
    assert (rejected.sender_id, rejected.code) == ("1", codes[0])
    assert store.request("telegram", "1") == Answer(None, reply=False)  # held, with a place free
    assert store.request("telegram", "4").code
    assert [r.sender_id for r in store.rejected()] == ["1"]
    with pytest.raises(PairingError, match="no pending pairing code"):
        store.reject(str(codes[0]))
    clock.now += CODE_TTL
    assert store.rejected() == []
    assert store.request("telegram", "1").code


def test_reject_all_clears_one_channel_or_every_channel(tmp_path: Path) -> None:
    """reject_all empties the waiting codes (of a channel when given) and approves nobody."""
    store = PairingStore(tmp_path / "state", Clock())
    for channel, sender in (("telegram", "1"), ("telegram", "2"), ("discord", "3")):
        assert store.request(channel, sender).code
    assert [p.sender_id for p in store.reject_all("telegram")] == ["1", "2"]
    assert [p.sender_id for p in store.pending()] == ["3"]
    assert [p.sender_id for p in store.reject_all()] == ["3"]
    assert store.pending() == [] and store.approved() == [] and store.reject_all() == []
    assert not store.is_approved("telegram", "1")


def test_a_broken_file_lets_nobody_in_and_is_kept(tmp_path: Path) -> None:
    """An unreadable pairing file is never overwritten; approvals fail closed with a clear error."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "pairing.json").write_text("{not json")
    store = PairingStore(state, Clock())
    assert not store.is_approved("telegram", "666")
    with pytest.raises(PairingError, match=r"pairing\.json: cannot be read"):
        store.request("telegram", "666")
    assert (state / "pairing.json").read_text() == "{not json"
    (state / "pairing.json").write_text("[" * 100_000)  # nested too deeply to decode
    assert not store.is_approved("telegram", "666")
    with pytest.raises(PairingError, match=r"pairing\.json: cannot be read"):
        store.request("telegram", "666")


def test_pair_command_approves_only_for_owners(tmp_path: Path) -> None:
    """/pair CODE from an owner approves, from anyone else it does nothing; /pair lists codes."""
    store = PairingStore(tmp_path / "state", Clock())
    code = store.request("telegram", "666", "Mallory").code
    assert code
    refused = pair_command(store, "telegram", "777", False, f"/pair {code}")
    assert "Only an owner" in refused and not store.is_approved("telegram", "666")
    listing = pair_command(store, "telegram", "42", True, "/pair")
    assert code in listing and "Mallory" in listing
    assert "Not approved" in pair_command(store, "discord", "42", True, f"/pair {code}")
    assert "Approved Mallory" in pair_command(store, "telegram", "42", True, f"/pair {code}")
    assert store.approved()[0].approved_by == "telegram:42"


def test_guests_dm_scope_follows_memory_guests() -> None:
    """A guest's DM gets the group scope unless memory.guests is shared; in a group, never more."""
    dm = InboundMessage("telegram", "666", "666", "hi", sender_is_owner=False)
    group = InboundMessage("telegram", "-5", "666", "hi", is_group=True, sender_is_owner=False)
    assert scope_for(dm, "private", "private").name == GROUP
    assert scope_for(dm, "private", "shared").name == PRIVATE
    assert scope_for(group, "shared", "shared").name == GROUP


def test_a_pairing_file_that_cannot_even_be_looked_at_lets_nobody_in(tmp_path: Path) -> None:
    """The state folder's pairing.json behind something that is not a folder: approvals fail
    closed with a False, not an exception in the channel judging each DM."""
    (tmp_path / "not-a-folder").write_text("")
    store = PairingStore(tmp_path / "not-a-folder", Clock())
    assert store.is_approved("telegram", "666") is False
