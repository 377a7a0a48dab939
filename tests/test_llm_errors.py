"""A failing model is a one-line diagnosis: the log says it once, a private reply names the cause."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from memory.consolidation.consolidator import Job
from tests.conftest import RuntimeFactory, inbound, memgate
from tests.fakes.llm import FakeLLM, error

CASES = [
    (
        "401",
        error(401, "Incorrect API key provided: sk-abc12***************wxyz"),
        {},
        "the API key was refused (llm.api_key)",
    ),
    (
        "404",
        error(404, "The model `gpt-9` does not exist"),
        {},
        "model or URL not found (llm.model / llm.base_url — does it end in /v1?)",
    ),
    ("refused", None, {"llm": {"base_url": "dead"}}, "could not reach 127.0.0.1:"),
    (
        "no-tools",
        None,
        {"llm": {"tools": "on"}},
        "does not support tool calling (set llm.tools: off)",
    ),
    (
        "429",
        error(429, "slow down", retry_after=30),
        {},
        "rate-limiting requests (HTTP 429); retry after 30s",
    ),
]


def agent_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "gateway.agent.loop"
        and r.levelno >= logging.INFO
        and "llm failed" in r.getMessage()
    ]


@pytest.mark.parametrize(("name", "reply", "overrides", "cause"), CASES, ids=[c[0] for c in CASES])
async def test_llm_failure_is_one_line_and_the_reply_names_the_cause(
    make_runtime: RuntimeFactory,
    fake_llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    name: str,
    reply: dict[str, Any] | None,
    overrides: dict[str, Any],
    cause: str,
    refused_port: int,
) -> None:
    """One WARNING line (no traceback below DEBUG), and a private reply that names the cause."""
    if overrides.get("llm", {}).get("base_url") == "dead":
        overrides = {"llm": {"base_url": f"http://127.0.0.1:{refused_port}/v1"}}
    if name == "no-tools":
        fake_llm.tools_unsupported = True
    if reply is not None:
        fake_llm.push(reply)
    caplog.set_level(logging.INFO)
    async with make_runtime(overrides) as runtime:
        answer = await runtime.agent.handle(inbound("hello"))
    assert answer is not None and answer.failed
    assert cause in answer.text and len(answer.text.splitlines()) == 1
    [line] = agent_warnings(caplog)
    assert line.levelno == logging.WARNING and "gpt-4o-mini" in line.getMessage()
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.INFO)
    assert "sk-abc12" not in caplog.text and "sk-abc12" not in answer.text


async def test_a_group_gets_the_short_generic_reply(runtime: Any, fake_llm: FakeLLM) -> None:
    """In a group the reply does not talk about keys and URLs."""
    fake_llm.push(error(401, "Incorrect API key provided"))
    message = inbound("@bot hi", is_group=True, mentioned=True, message_id="5")
    answer = await runtime.agent.handle(message)
    assert answer is not None and answer.failed
    assert "llm.api_key" not in answer.text and "HTTP 401" in answer.text


async def test_without_tool_calling_chats_and_consolidation_go_on(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """`llm.tools: auto` switches tools off once; replies and consolidation work without them."""
    fake_llm.tools_unsupported = True
    caplog.set_level(logging.INFO)
    async with make_runtime() as runtime:
        first = await runtime.agent.handle(inbound("first"))
        second = await runtime.agent.handle(inbound("second"))
        assert first is not None and first.text == "echo: first" and not first.failed
        assert second is not None and second.text == "echo: second"
        await runtime.consolidator.wait_idle()  # the turns' own checks, which find nothing due
        assert runtime.consolidator.enqueue(Job("test:42", "test:42", everything=True))
        await runtime.consolidator.wait_idle()
        memory = runtime.memory.read_memory()
        history = runtime.memory.read_history()
    switched = [r for r in caplog.records if "does not support tool calling" in r.getMessage()]
    assert len(switched) == 1 and switched[0].levelno == logging.WARNING
    offered = [bool(r.get("tools")) for r in fake_llm.requests]
    # One refused request offered tools; every later one, replies and consolidation, did not.
    assert offered[0] and not any(offered[1:])
    assert "- Fact from" in memory
    assert "Summary of" in history and "first" in history


async def test_chat_message_exits_1_with_the_cause_on_stderr(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """`memgate chat -m` exits 1 when the model failed, the cause on stderr, nothing on stdout."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'ws'}\nstate_dir: {tmp_path / 'state'}\n"
        f"llm:\n  base_url: {fake_llm.url}\n  api_key: sk-wrong-key-0123456789\n  max_retries: 0\n"
    )
    fake_llm.push(error(401, "Incorrect API key provided: sk-wrong*****6789"))
    code, out, err = await memgate("--config", str(config), "chat", "-m", "hi", home=tmp_path)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "the API key was refused (llm.api_key)" in err
    assert "Traceback" not in err and "sk-wrong" not in err


async def test_a_key_the_server_echoes_whole_is_redacted_from_log_and_reply(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused key that is not key-shaped, echoed whole by the server, shows as *** only.

    (The DEBUG traceback holds the SDK's own error; the log formatter redacts it, test_logs.py.)"""
    fake_llm.push(error(403, "key LocalSecret42 is not allowed here"))
    async with make_runtime({"llm": {"api_key": "LocalSecret42"}}) as runtime:
        with caplog.at_level(logging.INFO):
            answer = await runtime.agent.handle(inbound("hi"))
    assert answer is not None and "key *** is not allowed here" in answer.text
    assert "LocalSecret42" not in caplog.text and "LocalSecret42" not in answer.text
