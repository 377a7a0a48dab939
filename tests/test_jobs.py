"""Job rules without a running gateway: cron in a local time zone, intervals, `at` and the job file."""

from __future__ import annotations

import stat
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gateway.automation.jobs import (
    JobError,
    JobStore,
    new_job,
    next_after,
    next_cron,
    parse_interval,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def test_weekday_cron_stays_at_eight_local_across_the_spring_change() -> None:
    """'0 8 * * 1-5' in Berlin: 08:00 local on weekdays only, before and after DST starts."""
    after = datetime(2026, 3, 26, 12, 0, tzinfo=BERLIN).timestamp()  # Thursday; DST on 29 March
    runs = []
    for _ in range(6):
        after = next_cron("0 8 * * 1-5", after, BERLIN)
        runs.append(datetime.fromtimestamp(after, BERLIN))
    assert [r.strftime("%a %d %H:%M") for r in runs] == [
        "Fri 27 08:00",
        "Mon 30 08:00",
        "Tue 31 08:00",
        "Wed 01 08:00",
        "Thu 02 08:00",
        "Fri 03 08:00",
    ]
    # The same wall time is a different UTC time on either side of the change.
    assert [r.utcoffset().total_seconds() / 3600 for r in runs[:2]] == [1, 2]  # type: ignore[union-attr]


def test_cron_in_the_skipped_hour_runs_once_and_the_repeated_hour_once() -> None:
    """02:30 on the spring-forward day runs once (just after the jump); 01:30 in autumn once."""
    spring = datetime(2026, 3, 7, 12, 0, tzinfo=NEW_YORK).timestamp()
    first = next_cron("30 2 8 3 *", spring, NEW_YORK)
    assert datetime.fromtimestamp(first, NEW_YORK).strftime("%d %H:%M") == "08 03:30"
    autumn = datetime(2026, 10, 31, 12, 0, tzinfo=NEW_YORK).timestamp()
    runs = [next_cron("30 1 1 11 *", autumn, NEW_YORK)]
    runs.append(next_cron("30 1 1 11 *", runs[0], NEW_YORK))
    assert datetime.fromtimestamp(runs[0], NEW_YORK).strftime("%d %H:%M %Z") == "01 01:30 EDT"
    assert datetime.fromtimestamp(runs[1], NEW_YORK).year == 2027  # not again an hour later


def test_at_without_offset_is_read_in_the_configured_zone() -> None:
    """An `at` with no offset is local time of the config's zone; one with an offset is kept."""
    now = datetime(2026, 12, 1, 9, 0, tzinfo=BERLIN).timestamp()
    local = new_job(
        session="telegram:42", channel="telegram", chat_id="42", now=now, tz=BERLIN,
        at="2026-12-01T09:02:30", message="call the bank",
    )  # fmt: skip
    assert local.next_run == now + 150
    offset = new_job(
        session="telegram:42", channel="telegram", chat_id="42", now=now, tz=BERLIN,
        at="2026-12-01T09:00:00+00:00", message="x",
    )  # fmt: skip
    assert offset.next_run == now + 3600


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"at": "2026-12-01T08:00", "message": "x"}, "in the past"),
        ({"at": "tomorrow", "message": "x"}, "not an ISO 8601"),
        ({"every": "10s", "message": "x"}, "too often"),
        ({"every": "soon", "message": "x"}, "not an interval"),
        ({"cron": "0 8 * *", "message": "x"}, "five fields"),
        ({"at": "2026-12-02T08:00", "every": "1h", "message": "x"}, "exactly one of at"),
        ({"every": "1h", "message": "x", "prompt": "y"}, "exactly one of message"),
        ({"every": "1h", "prompt": "/new"}, "must not start with '/'"),
    ],
)
def test_bad_jobs_are_refused_with_the_reason(fields: dict[str, str], says: str) -> None:
    """Each malformed request is refused with a message naming what is wrong."""
    now = datetime(2026, 12, 1, 9, 0, tzinfo=BERLIN).timestamp()
    with pytest.raises(JobError, match=says):
        new_job(session="t:1", channel="t", chat_id="1", now=now, tz=BERLIN, **fields)


def test_interval_keeps_its_rhythm_after_a_long_stop() -> None:
    """An `every` job late by several intervals runs next on its own rhythm, not in a burst."""
    assert parse_interval("1h30m") == 5400
    job = new_job(
        session="t:1", channel="t", chat_id="1", now=0.0, tz=BERLIN, every="1h", message="x"
    )
    assert job.next_run == 3600
    assert next_after(job, 3600 * 5 + 10, BERLIN) == 3600 * 6


def test_job_file_is_owner_only_and_survives_a_reload(tmp_path: Path) -> None:
    """Jobs are written to STATE/jobs.json (0600) and read back whole by a new store."""
    store = JobStore(tmp_path)
    job = new_job(
        session="t:1", channel="t", chat_id="1", now=0.0, tz=BERLIN, cron="0 8 * * *", prompt="p"
    )
    store.put(job)
    assert stat.S_IMODE((tmp_path / "jobs.json").stat().st_mode) == 0o600
    assert JobStore(tmp_path).get(job.id) == job
    (tmp_path / "jobs.json").write_text("{not json")
    with pytest.raises(JobError, match="cannot read the jobs"):
        JobStore(tmp_path)
    assert (tmp_path / "jobs.json").read_text() == "{not json"  # left as it was, not emptied
    (tmp_path / "jobs.json").write_text("[" * 100_000)  # nested too deeply to decode
    with pytest.raises(JobError, match="cannot read the jobs"):
        JobStore(tmp_path)
