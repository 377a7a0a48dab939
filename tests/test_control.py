"""The control socket against a client's bad input: fields checked, size bounded, idle timed out."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from gateway.automation.jobs import new_job
from gateway.service.app import Runtime
from gateway.service.control import MAX_REQUEST, request
from tests.control_socket import UTC, exchange, no_tracebacks, serving
from tests.fakes.llm import FakeLLM

# Each request is refused, and its error names the field at fault.
BAD_REQUESTS: list[tuple[dict[str, Any], str]] = [
    ({"op": "chat", "text": "hi", "session": 5}, "session"),
    ({"op": "chat", "text": "hi", "session": ["a"]}, "session"),
    ({"op": "chat", "text": 5}, "text"),
    ({"op": "chat", "text": None}, "text"),
    ({"op": "chat"}, "text"),
    ({"op": "chat", "text": "hi", "sender": {"id": 1}}, "sender"),
    ({"op": "chat", "text": "hi", "sender": True}, "sender"),
    ({"op": "chat", "text": "hi", "channel": "telegram"}, "channel"),
    ({"op": "owed", "session": 5}, "session"),
    ({"op": "owed", "session": "terminal:local", "all": True}, "all"),
    ({"op": "status", "verbose": True}, "verbose"),
    ({"op": "jobs", "action": 3}, "action"),
    ({"op": "jobs"}, "action"),
    ({"op": "jobs", "action": "remove", "id": 7}, "id"),
    ({"op": "jobs", "action": "remove", "id": "x", "force": True}, "force"),
    ({"op": 1}, "op"),
    ({"op": None}, "op"),
    ({}, "op"),
    ({"op": "shutdown"}, "shutdown"),
]
# Lines that are not one JSON object; each gets an error line and no traceback.
BAD_LINES = [b"not json\n", b"[1, 2]\n", b'"chat"\n', b"\xff\xfe\n", b"[" * 100_000 + b"\n"]


async def test_every_field_of_every_request_is_checked_before_anything_runs(
    runtime: Runtime, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong type, a missing or an unknown field gets an error line naming it, and nothing runs:
    no turn (the model is not asked, no session file), no job changed."""
    job = runtime.scheduler.add(
        new_job(
            session="telegram:42",
            channel="telegram",
            chat_id="42",
            now=1.8e9,
            tz=UTC,
            every="1h",
            message="x",
        )
    )
    sessions = runtime.config.workspace / "sessions"
    async with serving(runtime) as path:
        for payload, field in BAD_REQUESTS:
            answer = await request(path, payload)
            assert answer is not None and set(answer) == {"error"}, payload
            assert field in answer["error"], (payload, answer)
        for line in BAD_LINES:
            answer = await exchange(path, line)
            assert set(answer) == {"error"}, line[:20]
        assert fake_llm.chat_requests() == []
        assert not list(sessions.glob("*.jsonl"))
        assert [j.id for j in runtime.scheduler.jobs()] == [job.id]
        # Well-formed requests are still served, nulls standing for fields not given.
        assert await request(path, {"op": "owed", "session": None}) == {"texts": []}
        answer = await request(path, {"op": "chat", "text": "hi", "session": None, "sender": None})
        assert answer == {"text": "echo: hi", "failed": False}
        listed = await request(path, {"op": "jobs", "action": "list", "id": None})
        assert listed is not None and listed["ok"] and job.id in listed["text"]
    no_tracebacks(caplog)


async def test_an_oversized_line_gets_an_error_line_and_no_traceback(
    runtime: Runtime, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """A line over the limit is answered with an error line; nothing runs, nothing is traced, and
    the socket serves the next client."""
    caplog.set_level(logging.DEBUG)
    async with serving(runtime) as path:
        line = json.dumps({"op": "chat", "text": "x" * MAX_REQUEST}).encode() + b"\n"
        answer = await exchange(path, line)
        assert set(answer) == {"error"} and "over" in answer["error"]
        # The client refuses it too, before it is sent: the same answer, no round trip.
        refused = await request(path, {"op": "chat", "text": "x" * MAX_REQUEST})
        assert refused is not None and set(refused) == {"error"} and "over" in refused["error"]
        assert await request(path, {"op": "chat", "text": "hi"}) == {
            "text": "echo: hi",
            "failed": False,
        }
    assert len(fake_llm.chat_requests()) == 1
    no_tracebacks(caplog)


async def test_an_idle_connection_is_closed_after_the_timeout(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that sends nothing, or half a line, is told so and closed after the idle timeout;
    the socket goes on serving others meanwhile."""
    caplog.set_level(logging.DEBUG)
    async with serving(runtime, idle_timeout=0.3) as path:
        silent = await asyncio.open_unix_connection(str(path))
        halting = await asyncio.open_unix_connection(str(path))
        halting[1].write(b'{"op": "stat')
        await halting[1].drain()
        assert await request(path, {"op": "status"}) is not None  # served while those wait
        for reader, writer in (silent, halting):
            async with asyncio.timeout(10):
                said = await reader.read()  # everything until the server closes it
            writer.close()
            answer = json.loads(said)
            assert set(answer) == {"error"} and "0.3" in answer["error"]
    no_tracebacks(caplog)
