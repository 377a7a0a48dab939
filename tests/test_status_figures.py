"""`memgate status` reads each session file only past where it last looked, so its cost follows
what changed, not the history the workspace holds."""

from __future__ import annotations

import logging

import pytest

from gateway.cli.status import describe
from gateway.service.app import Runtime
from gateway.state import session_figures_path
from memory.sessions.figures import FiguresCache
from memory.sessions.file import parse_session_bytes
from memory.sessions.index import owed_among
from tests.conftest import corrupt_line, inbound, turns


async def test_a_second_status_reads_only_the_lines_appended_since_the_first(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """After a first look, status parses no line it has seen (an old line spoilt in place goes
    unread) and counts the appended ones."""
    await turns(runtime, 5)
    config = runtime.config
    assert "pending:    10 messages not yet consolidated" in describe(config)
    corrupt_line(runtime.sessions.path_for("test:42"), 2)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memory.sessions.file"):
        assert "pending:    10 messages not yet consolidated" in describe(config)
        await turns(runtime, 2)
        assert "pending:    14 messages not yet consolidated" in describe(config)
    assert [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()] == []
    assert session_figures_path(config.state_dir).exists()


async def test_the_figures_follow_appends_and_a_new_file(runtime: Runtime) -> None:
    """The cached figures equal a whole read after appends, delivered marks and /new; a look at
    an unchanged file parses nothing, one after appends parses just those bytes."""
    path = runtime.sessions.path_for("test:42")
    cache_path = runtime.config.state_dir / "figures-test.json"

    def whole_read() -> tuple[int, int, int]:
        whole = parse_session_bytes(path.read_bytes())
        owed = owed_among(whole.messages, whole.delivered)
        # the Chats page's figures too: the last message's time
        last[0] = str(whole.messages[-1]["timestamp"])
        return len(whole.messages), whole.last_consolidated, len(owed)

    def look() -> tuple[tuple[int, int, int], int]:
        cache = FiguresCache(cache_path)
        figures = cache.figures(path)
        cache.save()
        last[1] = figures.last_active
        return (figures.messages, figures.pointer, len(figures.owed)), cache.parsed_bytes

    last = ["", ""]  # the last message's time: as a whole read says, as the cache says
    await turns(runtime, 3)
    assert look()[0] == whole_read() == (6, 0, 3)
    assert last[0] == last[1] != ""
    assert look()[1] == 0
    size = path.stat().st_size
    reply = await runtime.agent.handle(inbound("one more"))
    assert reply is not None
    await reply.sent()  # its delivered mark is appended too
    figures, parsed = look()
    assert figures == whole_read() == (8, 0, 3)
    assert last[0] == last[1]
    assert parsed == path.stat().st_size - size
    await runtime.agent.handle(inbound("/new"))  # the file moves to the archive; a new one starts
    await turns(runtime, 1)
    assert look()[0] == whole_read() == (2, 0, 1)
    assert last[0] == last[1]
