"""The console's Memory page: MEMORY.md shown, versions diffed and restored, edits, and both
changes as compare-and-writes that never lose what a consolidation wrote."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory, listen_port, turns
from tests.console_client import ConsoleClient, client, login_url, serving
from tests.fakes.llm import FakeLLM, consolidation_reply, is_consolidation

SEEN = re.compile(r'name="seen" value="([0-9a-f]{64})"')
FIRST = "# Long-term Memory\n\n- The user's cat is called Miso.\n"
SECOND = "# Long-term Memory\n\n- The user's cat is called Tofu.\n"


@pytest.fixture
async def console_runtime(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    overrides = {"console": {"listen": f"127.0.0.1:{listen_port()}"}, "memory": {"window": 4}}
    async with make_runtime(overrides) as runtime:
        yield runtime


@pytest.fixture
async def browser(console_runtime: Runtime) -> AsyncIterator[ConsoleClient]:
    async with serving(console_runtime) as base, client(base) as logged_in:
        assert await logged_in.login(login_url(console_runtime.config)) == 303
        yield logged_in


def versions(runtime: Runtime) -> list[str]:
    return [path.name for path in runtime.memory.list_versions()]


async def test_memory_is_shown_with_its_facts_and_versions(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """The page renders MEMORY.md (its HTML escaped) and lists each kept version."""
    console_runtime.memory.write_memory(FIRST)
    console_runtime.memory.write_memory(SECOND + "- <b>likes</b> tea\n")
    status, html = await browser.get("/memory")
    assert status == 200
    assert "<li>The user&#x27;s cat is called Tofu.</li>" in html
    assert "&lt;b&gt;likes&lt;/b&gt; tea" in html and "<b>likes" not in html
    assert all(name in html for name in versions(console_runtime))


async def test_a_diff_between_two_versions(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """The diff of an older version against the current text marks the changed fact."""
    console_runtime.memory.write_memory(FIRST)
    console_runtime.memory.write_memory(SECOND)
    older = versions(console_runtime)[-1]  # holds FIRST
    status, html = await browser.get(f"/memory/diff?a={older}&b=current")
    assert status == 200
    assert '<span class="del">-- The user&#x27;s cat is called Miso.</span>' in html
    assert '<span class="add">+- The user&#x27;s cat is called Tofu.</span>' in html
    assert (await browser.get("/memory/diff?a=../../config.yaml&b=current"))[0] == 404


async def test_restore_makes_an_older_version_current_and_keeps_the_current(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """Restore: MEMORY.md holds the version again; the text it replaced is kept as a version."""
    memory = console_runtime.memory
    memory.write_memory(FIRST)
    memory.write_memory(SECOND)
    older = versions(console_runtime)[-1]
    _, html = await browser.get("/memory")
    [seen, *_] = SEEN.findall(html)
    status, _, location = await browser.post("/memory/restore", {"version": older, "seen": seen})
    assert status == 303
    assert memory.read_memory() == FIRST
    assert any(p.read_text() == SECOND for p in memory.list_versions())
    _, shown = await browser.follow(location)
    assert f"Restored MEMORY.md from {older}" in shown and "Miso" in shown


async def test_an_edit_is_saved_and_a_stale_edit_shows_both_texts(
    console_runtime: Runtime, browser: ConsoleClient
) -> None:
    """An edit writes MEMORY.md; one made on a page older than the file is 409, nothing lost."""
    memory = console_runtime.memory
    memory.write_memory(FIRST)
    _, html = await browser.get("/memory/edit")
    [seen] = SEEN.findall(html)
    status, _, _ = await browser.post(
        "/memory/edit", {"text": SECOND.replace("\n", "\r\n"), "seen": seen}
    )
    assert status == 303 and memory.read_memory() == SECOND
    memory.write_memory(SECOND + "- Consolidated: the user moved to Lisbon.\n")
    mine = SECOND + "- The user plays the cello.\n"
    status, html, _ = await browser.post("/memory/edit", {"text": mine, "seen": seen})
    assert status == 409
    assert "moved to Lisbon" in html and "plays the cello" in html
    assert memory.read_memory() == SECOND + "- Consolidated: the user moved to Lisbon.\n"


async def test_a_restore_on_a_page_older_than_a_consolidation_is_refused(
    console_runtime: Runtime, browser: ConsoleClient, fake_llm: FakeLLM
) -> None:
    """The owner looks, a consolidation lands, the owner restores: 409, its fact stays."""
    memory = console_runtime.memory
    memory.write_memory(FIRST)
    memory.write_memory(SECOND)
    older = versions(console_runtime)[-1]
    _, html = await browser.get("/memory")
    [seen, *_] = SEEN.findall(html)
    fake_llm.push(consolidation_reply, match=is_consolidation)
    await turns(console_runtime, 2)
    await console_runtime.consolidator.wait_idle()
    assert "- Fact from" in memory.read_memory()
    status, html, _ = await browser.post("/memory/restore", {"version": older, "seen": seen})
    assert status == 409 and "Fact from" in html
    assert "- Fact from" in memory.read_memory()


async def test_a_restore_while_a_consolidation_lands_keeps_its_fact(
    console_runtime: Runtime, browser: ConsoleClient, fake_llm: FakeLLM
) -> None:
    """A restore between consolidation's read and write: the merge is asked again over the
    restored text, and MEMORY.md ends with both the restored fact and the consolidation's."""
    memory = console_runtime.memory
    memory.write_memory(FIRST)
    memory.write_memory(SECOND)
    older = versions(console_runtime)[-1]
    release = asyncio.Event()
    fake_llm.push(consolidation_reply, hold=release, match=is_consolidation)
    fake_llm.push(consolidation_reply, match=is_consolidation)
    await turns(console_runtime, 2)
    await fake_llm.wait_for_requests(1, kind="consolidation")  # it has read MEMORY.md
    _, html = await browser.get("/memory")
    [seen, *_] = SEEN.findall(html)
    status, _, _ = await browser.post("/memory/restore", {"version": older, "seen": seen})
    assert status == 303 and memory.read_memory() == FIRST
    release.set()
    await console_runtime.consolidator.wait_idle()
    final = memory.read_memory()
    assert "Miso" in final and "- Fact from" in final
    assert len(fake_llm.consolidation_requests()) == 2
