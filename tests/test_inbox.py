"""The Telegram inbox journal on real files: what a restart replays, and what it ignores."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import channels.inbox
from channels.inbox import Inbox
from channels.seen import Seen
from gateway.service.app import Runtime
from tests.conftest import telegram_inbox_pending
from tests.fakes.telegram_api import WAIT, FakeTelegram
from tests.fakes.telegram_harness import agent_channel, running


def update(update_id: int, text: str = "hi") -> dict[str, object]:
    return {"update_id": update_id, "message": {"message_id": update_id, "text": text}}


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_new_inbox_is_empty_and_created(tmp_path: Path) -> None:
    """Opening where no journal exists replays nothing and creates the file (and its folder)."""
    inbox = Inbox(tmp_path / "state" / "inbox.jsonl")
    assert inbox.open() == []
    inbox.close()
    assert (tmp_path / "state" / "inbox.jsonl").read_bytes() == b""


def test_unfinished_updates_are_replayed_in_order_and_the_file_compacted(tmp_path: Path) -> None:
    """After a restart the updates without a done line come back oldest first, and only they stay."""
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.open()
    for update_id in (7, 5, 6):
        inbox.append(update(update_id, f"m{update_id}"))
    inbox.finish(6)
    assert inbox.holds(5) and not inbox.holds(6)
    inbox.close()  # as a killed process leaves it: no more writes
    again = Inbox(path)
    assert again.open() == [update(5, "m5"), update(7, "m7")]
    assert again.holds(5) and again.holds(7)
    assert lines(path) == [{"update": update(5, "m5")}, {"update": update(7, "m7")}]
    again.finish(5)
    again.finish(7)
    again.close()
    assert Inbox(path).open() == []
    assert path.read_bytes() == b""  # nothing pending: truncated


def test_the_parts_of_an_answer_sent_survive_restarts_until_the_entry_is_done(
    tmp_path: Path,
) -> None:
    """Parts of a long answer noted as out are known after any number of restarts (each one
    rewrites the file), for the pending entry only, and forgotten once it is done."""
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.open()
    inbox.append(update(5))
    inbox.append(update(6))
    inbox.part_sent(5, 1)
    inbox.part_sent(5, 2)
    inbox.part_sent(7, 1)  # no such pending entry: nothing noted
    inbox.close()
    for _ in range(2):
        again = Inbox(path)
        assert [u["update_id"] for u in again.open()] == [5, 6]
        assert (again.parts_sent(5), again.parts_sent(6), again.parts_sent(7)) == (2, 0, 0)
        again.close()
    last = Inbox(path)
    last.open()
    last.finish(5)
    last.close()
    final = Inbox(path)
    assert [u["update_id"] for u in final.open()] == [6]
    assert final.parts_sent(5) == 0


def test_a_live_reply_s_messages_survive_restarts_until_the_entry_is_done(
    tmp_path: Path,
) -> None:
    """The messages a live reply showed are known after restarts (each one rewrites the file),
    the latest list only, for the pending entry only, and forgotten once it is done."""
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.open()
    inbox.append(update(5))
    inbox.append(update(6))
    inbox.record_live(5, [31])
    inbox.record_live(5, [31, 32])
    inbox.record_live(7, [40])  # no such pending entry: nothing noted
    inbox.close()
    for _ in range(2):
        again = Inbox(path)
        assert [u["update_id"] for u in again.open()] == [5, 6]
        assert [again.live_messages(key) for key in (5, 6, 7)] == [[31, 32], [], []]
        again.close()
    last = Inbox(path)
    last.open()
    last.finish(5)
    last.close()
    final = Inbox(path)
    assert [u["update_id"] for u in final.open()] == [6]
    assert final.live_messages(5) == []


def test_finishing_twice_writes_one_done_line(tmp_path: Path) -> None:
    """finish() of an update already finished, or never received, writes nothing."""
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.open()
    inbox.append(update(1))
    inbox.finish(1)
    inbox.finish(1)
    inbox.finish(99)
    inbox.close()
    assert lines(path) == [{"update": update(1)}, {"done": 1}]


def test_a_torn_last_line_and_a_corrupt_line_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A line cut short by a kill, garbage, or one nested too deeply to decode costs only itself;
    the other entries are kept."""
    path = tmp_path / "inbox.jsonl"
    path.write_text(
        json.dumps({"update": update(1)})
        + "\n{not json\n"
        + json.dumps([1, 2])
        + "\n"
        + json.dumps({"update": update(2)})
        + "\n"
        + json.dumps({"done": 2})
        + "\n"
        + "[" * 100_000  # nested too deeply to decode
        + "\n"
        + json.dumps({"update": update(3)})[:20]  # torn: no closing brace, no newline
    )
    inbox = Inbox(path)
    assert inbox.open() == [update(1)]
    inbox.close()
    warned = [r for r in caplog.records if "unreadable line" in r.getMessage()]
    assert [r.getMessage().rsplit("=", 1)[1] for r in warned] == ["2", "3", "6", "7"]


def test_an_update_waiting_through_many_starts_is_never_dropped(tmp_path: Path) -> None:
    """However many starts an update waits through (load, a crash loop), it stays journaled."""
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.open()
    inbox.append(update(1, "patient"))
    inbox.close()
    for _ in range(30):
        restarted = Inbox(path)
        assert restarted.open() == [update(1, "patient")]
        restarted.close()  # killed again before finishing it


def test_an_idle_journal_past_the_limit_is_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once nothing is pending and the file passed TRUNCATE_AT, it starts over; later lines count."""
    monkeypatch.setattr(channels.inbox, "TRUNCATE_AT", 200)
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.open()
    inbox.append(update(1, "x" * 300))
    inbox.append(update(2))
    inbox.finish(1)
    assert path.stat().st_size > 200  # update 2 is still pending: kept
    inbox.finish(2)
    assert path.read_bytes() == b""
    inbox.append(update(3))
    inbox.close()
    assert Inbox(path).open() == [update(3)]


def test_lone_surrogates_are_journaled_as_ascii(tmp_path: Path) -> None:
    """Text with a lone surrogate is written (escaped) and read back as it was."""
    path = tmp_path / "inbox.jsonl"
    inbox = Inbox(path)
    inbox.open()
    inbox.append(update(1, "broken \ud800 text"))
    inbox.close()
    path.read_bytes().decode("ascii")
    assert Inbox(path).open() == [update(1, "broken \ud800 text")]


def test_open_twice_raises(tmp_path: Path) -> None:
    """An inbox is opened once per run."""
    inbox = Inbox(tmp_path / "inbox.jsonl")
    inbox.open()
    with pytest.raises(RuntimeError, match="already"):
        inbox.open()
    inbox.close()


async def test_a_command_is_done_in_the_journal_before_its_reply_is_out(
    fake_telegram: FakeTelegram, runtime: Runtime
) -> None:
    """/new's reply held by Telegram: its entry is already done, so a stop then (or a kill) does
    not run the command again at the next start; only the next message is answered."""
    async with running(agent_channel(fake_telegram, runtime)):
        with fake_telegram.sends_unanswered() as arrived:
            update_id = fake_telegram.message("/new")
            await asyncio.wait_for(arrived.wait(), WAIT)
            assert update_id not in telegram_inbox_pending(runtime.config.state_dir)
    async with running(agent_channel(fake_telegram, runtime)):
        fake_telegram.message("hello again")
        await fake_telegram.wait_for(lambda: len(fake_telegram.sent(42)) == 1)
    assert [p["text"] for p in fake_telegram.sent(42)] == ["echo: hello again"]


def test_seen_ids_are_bounded_and_forget_the_oldest_first() -> None:
    """A long run's memory of ids stays at its size: the oldest id goes first, one seen again
    counts as recent, and check() names a repeat by any of its keys."""
    seen = Seen(["a", "b"], size=3)
    seen.add("c")
    assert seen.check("a")  # seen: now the most recent
    seen.add("d")  # forgets b, the oldest
    assert "b" not in seen and all(key in seen for key in "acd") and len(seen) == 3
    assert not seen.check("e", "")  # new; the empty key is left out
    assert seen.check("x", "e") and "" not in seen
    for n in range(1000):
        seen.add(f"id{n}")
    assert len(seen) == 3 and "id999" in seen and "e" not in seen
