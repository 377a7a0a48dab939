"""The console's Access and Jobs pages: each action takes the CLI's own path (the pairing file,
the scheduler's operations) and the page shows what it did."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from channels.pairing import PairingStore
from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory, listen_port
from tests.console_client import ConsoleClient, client, login_url, serving
from tests.scheduling import job


@pytest.fixture
async def console_runtime(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    overrides = {
        "console": {"listen": f"127.0.0.1:{listen_port()}"},
        "channels": {"telegram": {"allow_from": ["42", "@owner"]}},
    }
    async with make_runtime(overrides) as runtime:
        yield runtime


@pytest.fixture
async def browser(console_runtime: Runtime) -> AsyncIterator[ConsoleClient]:
    async with serving(console_runtime) as base, client(base) as logged_in:
        assert await logged_in.login(login_url(console_runtime.config)) == 303
        yield logged_in


async def test_a_pending_code_is_approved_and_then_revoked(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """Approve lets the code's sender in through the pairing file; revoke takes it back."""
    store = PairingStore(console_runtime.config.state_dir)
    code = store.request("telegram", "666", "Mallory").code
    assert code is not None
    status, html = await browser.get("/access")
    assert status == 200 and code in html and "telegram:666" in html and "Mallory" in html
    assert "42, @owner" in html  # the owners, read-only
    status, _, location = await browser.post("/access/approve", {"code": code})
    assert status == 303 and store.is_approved("telegram", "666")
    _, html = await browser.follow(location)
    assert "Approved telegram:666 (Mallory)" in html and "by console" in html
    status, _, location = await browser.post("/access/revoke", {"address": "telegram:666"})
    assert status == 303 and not store.is_approved("telegram", "666")
    assert "Revoked telegram:666" in (await browser.follow(location))[1]


async def test_a_code_is_rejected_and_a_wrong_one_changes_nothing(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """Reject drops the code and holds its sender; an unknown code is named, nothing changes."""
    store = PairingStore(console_runtime.config.state_dir)
    code = store.request("telegram", "777", "Eve").code
    assert code is not None
    await browser.get("/access")
    _, _, location = await browser.post("/access/reject", {"code": code})
    assert store.pending() == [] and [r.address for r in store.rejected()] == ["telegram:777"]
    assert f"Rejected {code}" in (await browser.follow(location))[1]
    _, _, location = await browser.post("/access/approve", {"code": "ZZZZ2222"})
    _, html = await browser.follow(location)
    assert "Nothing changed: no pending pairing code ZZZZ2222" in html
    assert store.approved() == []


async def test_a_job_is_paused_resumed_and_removed(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """Pause, resume and remove act on the scheduler the service runs, as `memgate jobs` does."""
    made = job(console_runtime, every="1h", message="drink water")
    scheduler = console_runtime.scheduler
    status, html = await browser.get("/jobs")
    assert status == 200 and made.id in html and "drink water" in html and "active" in html
    _, _, location = await browser.post("/jobs/pause", {"id": made.id})
    assert scheduler.jobs()[0].paused == "paused by the owner"
    _, html = await browser.follow(location)
    assert f"Paused job {made.id}." in html and "paused (paused by the owner)" in html
    await browser.post("/jobs/resume", {"id": made.id})
    assert scheduler.jobs()[0].paused is None
    _, _, location = await browser.post("/jobs/remove", {"id": made.id})
    assert scheduler.jobs() == []
    assert f"Removed job {made.id}." in (await browser.follow(location))[1]
    _, _, location = await browser.post("/jobs/pause", {"id": "nope"})
    assert "no job &#x27;nope&#x27;" in (await browser.follow(location))[1]
