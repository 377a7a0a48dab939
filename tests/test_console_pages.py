"""The console's read-only pages: Chats (sessions and one chat, tool calls folded), History (a
timeline and the memory search) and Status (the service's live state, failures, daily charts)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.service.app import Runtime
from gateway.service.run import optional_states
from memory.consolidation.failures import FAILURE_REPORT
from tests.conftest import RuntimeFactory, corrupt_line, listen_port, turns
from tests.console_client import ConsoleClient, client, login_url, serving
from tests.fakes.llm import FakeLLM, text, tool_call

SECRET = "sk-test-secret-key-0123456789"  # the api_key of tests.conftest.build_config


@pytest.fixture
async def console_runtime(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    async with make_runtime({"console": {"listen": f"127.0.0.1:{listen_port()}"}}) as runtime:
        yield runtime


def live_state(runtime: Runtime) -> dict[str, Any]:
    return {
        "channels": {"telegram": True, "discord": False},
        "queue": 3,
        **optional_states(runtime),
    }


@pytest.fixture
async def browser(console_runtime: Runtime) -> AsyncIterator[ConsoleClient]:
    async with (
        serving(console_runtime, lambda: live_state(console_runtime)) as base,
        client(base) as logged_in,
    ):
        assert await logged_in.login(login_url(console_runtime.config)) == 303
        yield logged_in


async def test_chats_lists_sessions_and_shows_one_with_tool_calls_folded(
    console_runtime: Runtime, browser: ConsoleClient, fake_llm: FakeLLM
) -> None:
    """The list names each session and its counts; a chat's page shows its messages, each tool
    call and result folded under <details>, and nothing of another file."""
    fake_llm.push(tool_call("memory_search", {"query": "cat"}))
    fake_llm.push(text("Your cat is <b>Miso</b>."))
    await turns(console_runtime, 1)
    await turns(console_runtime, 1, "7")
    status, html = await browser.get("/chats")
    assert status == 200
    assert "test%3A42" in html and "test:7" in html and "0 of 4" in html
    status, html = await browser.get("/chats/view?key=test%3A42")
    assert status == 200
    assert "chat 42 turn 0" in html and "Your cat is &lt;b&gt;Miso&lt;/b&gt;." in html
    assert "<details><summary>calls memory_search</summary>" in html
    assert "&quot;query&quot;: &quot;cat&quot;" in html
    assert "<details><summary>result of" in html
    assert (await browser.get("/chats/view?key=..%2F..%2Fconfig"))[0] == 404


async def test_chats_reads_only_what_was_appended_since_it_was_last_shown(
    console_runtime: Runtime, browser: ConsoleClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The list keeps each file's figures between looks: an old line spoilt in place goes unread
    (a whole read would warn of it) and new turns are counted."""
    await turns(console_runtime, 5)
    await turns(console_runtime, 1, "7")
    status, html = await browser.get("/chats")
    assert status == 200 and "0 of 10" in html
    corrupt_line(console_runtime.sessions.path_for("test:42"), 2)
    await turns(console_runtime, 1)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memory.sessions.file"):
        status, html = await browser.get("/chats")
    assert status == 200 and "0 of 12" in html
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()]


async def test_history_is_a_timeline_and_searchable(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """Entries newest first with their dates; a search goes through the memory search."""
    memory = console_runtime.memory
    memory.append_history("[2026-11-30 09:15] The user adopted a cat named Miso.", entry_id="a")
    memory.append_history("[2026-12-01 18:40] The user planned a trip to Lisbon.", entry_id="b")
    status, html = await browser.get("/history")
    assert status == 200
    assert html.index("2026-12-01 18:40") < html.index("2026-11-30 09:15")
    assert "<time>2026-11-30 09:15</time>" in html and "memgate:a" not in html
    status, html = await browser.get("/history?q=Lisbon")
    assert status == 200 and "<mark>Lisbon</mark>" in html and "Miso" not in html
    assert "No matches for" in (await browser.get("/history?q=zebra"))[1]


async def test_status_shows_live_state_failures_and_daily_charts(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """Channels up and down, the queue, a failing session, and today's turns in the chart; no
    secret of the config anywhere."""
    report = {"failing": {"telegram:9": {"failures": 2, "error": "timeout"}}, "raw": {}}
    (console_runtime.config.state_dir / FAILURE_REPORT).write_text(json.dumps(report))
    await turns(console_runtime, 3)
    status, html = await browser.get("/status")
    assert status == 200
    assert "<td>telegram</td><td>connected</td>" in html
    assert "<td>discord</td><td><strong>down</strong></td>" in html
    assert "3 job(s) queued" in html and "telegram:9" in html and "timeout" in html
    assert "Turns per day (most: 3)" in html and "<svg" in html
    await turns(console_runtime, 1)  # a file changed since: counted again, not taken as known
    assert "Turns per day (most: 4)" in (await browser.get("/status"))[1]
    for path in ("/status", "/chats", "/history", "/memory", "/jobs", "/access"):
        assert SECRET not in (await browser.get(path))[1], path
