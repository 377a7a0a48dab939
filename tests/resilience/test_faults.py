"""Faults: the LLM and the Bot API fail in every way the issue lists, under the real `memgate run`.

Each case: the process survives (it answers the next message), the user gets a clear message where
one is due, what was stored before is byte-for-byte still there, and the log says what happened.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from channels.telegram.delivery import SEND_ATTEMPTS
from channels.utf16 import utf16_length
from tests.conftest import telegram_inbox_pending
from tests.fakes.llm import FakeLLM, Reply, error, text, tool_call
from tests.fakes.telegram_api import FakeTelegram
from tests.resilience.conftest import GatewayFactory
from tests.resilience.harness import Gateway, read_session, session_paths, until

pytestmark = pytest.mark.timeout(120)

CHAT = 42


def stored(workspace: Path) -> dict[Path, bytes]:
    """The bytes of every session file and memory file, to compare after a fault."""
    paths = [*session_paths(workspace), *sorted((workspace / "memory").glob("*.md"))]
    return {path: path.read_bytes() for path in paths}


def assert_intact(before: dict[Path, bytes], workspace: Path) -> None:
    """Append-only files only grew; every session line parses; a MEMORY.md that consolidation
    rewrote kept its facts, and its previous text is in memory/versions/."""
    for path, data in before.items():
        now = path.read_bytes()
        if path.name == "MEMORY.md":
            if now != data:
                kept = [v.read_bytes() for v in (path.parent / "versions").glob("*.md")]
                assert data in kept, "MEMORY.md was rewritten without keeping its old text"
                assert data.strip() in now, "MEMORY.md lost facts it had before the fault"
        else:
            assert now.startswith(data), f"{path.name} lost bytes it had before the fault"
    for path in session_paths(workspace):
        read_session(path)


async def ask(telegram: FakeTelegram, message: str, within: float = 30) -> str:
    """Send a message from the allowed user and return the text of the next answer."""
    count = len(telegram.sent(CHAT))
    telegram.message(message, chat_id=CHAT, user_id=CHAT)
    await until(lambda: len(telegram.sent(CHAT)) > count, within, f"an answer to {message!r}")
    return str(telegram.sent(CHAT)[count].get("plain"))


async def started(make_gateway: GatewayFactory, settings: dict[str, Any] | None = None) -> Gateway:
    """A running gateway that has already had one ordinary exchange."""
    gateway = make_gateway(settings)
    await gateway.start()
    assert await ask(gateway.telegram, "before the fault") == "echo: before the fault"
    return gateway


async def survives(gateway: Gateway) -> None:
    """The same process is still serving: healthy, and answering."""
    assert gateway.alive
    health = await gateway.health()
    assert health is not None and health["channels"]["telegram"]["connected"]
    assert await ask(gateway.telegram, "after the fault") == "echo: after the fault"


# -- the LLM ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LLMFault:
    name: str
    replies: list[tuple[Reply, float]]  # (reply, delay) pushed to the fake LLM
    answer: str  # part of what the user must be told
    logged: tuple[str, ...] = ()  # parts of what the log must say
    settings: dict[str, Any] = field(default_factory=dict)


LLM_FAULTS = [
    LLMFault(
        "http-500",
        [(error(500, "internal meltdown"), 0)],
        "answered HTTP 500: internal meltdown",
        ("llm failed session=telegram:42", "HTTP 500: internal meltdown"),
    ),
    LLMFault(
        "http-429",
        [(error(429, "slow down", retry_after=7), 0)],
        "is rate-limiting requests (HTTP 429); retry after 7s",
        ("llm failed session=telegram:42", "slow down"),
    ),
    LLMFault(
        "timeout",
        [(text("far too late"), 4.0)],
        "did not answer in time",
        ("llm failed session=telegram:42", "LLMTimeoutError"),
        {"llm": {"timeout": 1}},
    ),
    LLMFault(
        "malformed-json",
        [({"raw": '{"id": "x", "choices": [{"message": {"content": "trunc'}, 0)],
        "the model's answer was unusable",
        ("llm failed session=telegram:42", "unusable answer"),
    ),
    LLMFault(
        "unknown-tool",
        [(tool_call("launch_rockets", {"count": 3}), 0), (text("I have no such tool."), 0)],
        "I have no such tool.",
    ),
    LLMFault(
        "invalid-tool-arguments",
        [
            (tool_call("read_file", "{not json"), 0),
            (tool_call("read_file", "[1, 2]"), 0),
            (tool_call("write_file", {"path": 7, "content": None}), 0),
            (tool_call("edit_file", {"path": "memory/MEMORY.md"}), 0),
            (text("Those calls failed."), 0),
        ],
        "Those calls failed.",
    ),
]


@pytest.mark.parametrize("fault", LLM_FAULTS, ids=[f.name for f in LLM_FAULTS])
async def test_llm_fault(make_gateway: GatewayFactory, fake_llm: FakeLLM, fault: LLMFault) -> None:
    """A failing model gives the user a short clear reply; stored lines and the process survive."""
    gateway = await started(make_gateway, fault.settings)
    before = stored(gateway.workspace)
    for reply, delay in fault.replies:
        fake_llm.push(reply, delay=delay)
    answer = await ask(gateway.telegram, f"trigger {fault.name}")
    assert fault.answer in answer and len(answer) < 200
    await survives(gateway)
    assert_intact(before, gateway.workspace)
    log = gateway.log()
    for part in fault.logged:
        assert part in log, f"the log does not say {part!r}"
    [session] = [read_session(p) for p in session_paths(gateway.workspace)]
    assert f"trigger {fault.name}" in session.texts("user")
    assert not any("Sorry" in t for t in session.texts("assistant"))  # errors are not stored
    tool_results = session.texts("tool")
    assert all(t.startswith("Error:") for t in tool_results)
    assert len(tool_results) == len(fault.replies) - 1 if tool_results else True


async def test_tool_call_errors_are_logged(make_gateway: GatewayFactory, fake_llm: FakeLLM) -> None:
    """An unknown tool and unparsable arguments leave a line in the log naming the tool."""
    gateway = await started(make_gateway)
    fake_llm.push(tool_call("launch_rockets", {"count": 3}))
    fake_llm.push(tool_call("read_file", "{not json"))
    fake_llm.push(text("done"))
    assert await ask(gateway.telegram, "use odd tools") == "done"
    log = gateway.log()
    assert "launch_rockets" in log
    assert "read_file" in log and "JSON" in log


async def test_a_two_megabyte_reply_arrives_whole_and_is_stored(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """A 2 MB answer is stored whole and delivered in pieces within Telegram's limit."""
    gateway = await started(make_gateway)
    before = stored(gateway.workspace)
    huge = ("All work and no play makes a dull answer. " * 50 + "\n\n") * 960
    assert len(huge) >= 2_000_000
    fake_llm.push(text(huge))
    count = len(fake_telegram.sent(CHAT))
    fake_telegram.message("write me a novel", chat_id=CHAT, user_id=CHAT)
    expected = huge.count("dull")
    await until(
        lambda: (
            sum(p.get("plain", "").count("dull") for p in fake_telegram.sent(CHAT)[count:])
            >= expected
        ),
        90,
        "every piece of the 2 MB answer",
    )
    pieces = fake_telegram.sent(CHAT)[count:]
    assert all(utf16_length(p["text"]) <= 4096 for p in pieces)
    await survives(gateway)
    assert_intact(before, gateway.workspace)
    [session] = [read_session(p) for p in session_paths(gateway.workspace)]
    assert huge.strip() in session.texts("assistant")
    print(f"2 MB reply: {len(pieces)} Telegram messages")


# -- the Bot API --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "description"),
    [(500, "Internal Server Error"), (502, "Bad Gateway")],
    ids=["500", "502"],
)
async def test_a_send_failing_with_5xx_is_logged_and_kept(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram, status: int, description: str
) -> None:
    """A reply Telegram refuses with a 5xx on every try is logged and stays in the session; the
    bot goes on."""
    gateway = await started(make_gateway)
    before = stored(gateway.workspace)
    for _ in range(SEND_ATTEMPTS):
        fake_telegram.fail_next("sendMessage", status, description)
    fake_telegram.message("answer into a 5xx", chat_id=CHAT, user_id=CHAT)
    await until(lambda: "telegram send failed" in gateway.log(), 30, "the send failure in the log")
    assert description in gateway.log()
    await survives(gateway)
    assert_intact(before, gateway.workspace)
    [session] = [read_session(p) for p in session_paths(gateway.workspace)]
    assert "echo: answer into a 5xx" in session.texts("assistant")


async def test_a_send_failing_once_with_5xx_is_retried(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram
) -> None:
    """A transient 502 on sendMessage is retried, and the answer reaches the user once."""
    await started(make_gateway)
    fake_telegram.fail_next("sendMessage", 502, "Bad Gateway")
    answer = await ask(fake_telegram, "answer into a 502", within=10)
    assert answer == "echo: answer into a 502"


async def test_flood_control_is_waited_out_and_delivers_once(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram
) -> None:
    """A 429 with retry_after is honoured: one delivery, no send during the penalty."""
    gateway = await started(make_gateway)
    fake_telegram.fail_next("sendMessage", 429, "Too Many Requests: retry after 2", retry_after=2)
    assert await ask(fake_telegram, "flooded") == "echo: flooded"
    # Once its done line is written the reply's delivery is over: a second send would be before.
    await until(lambda: not telegram_inbox_pending(gateway.state_dir), 10, "the inbox done line")
    assert [p.get("plain") for p in fake_telegram.sent(CHAT)].count("echo: flooded") == 1
    assert fake_telegram.penalty_violations == 0
    assert "telegram flood control chat_id=42 retry_after=2" in gateway.log()
    await survives(gateway)


async def test_a_send_that_times_out_is_logged_and_not_sent_twice(
    make_gateway: GatewayFactory, fake_telegram: FakeTelegram
) -> None:
    """A sendMessage held past python-telegram-bot's 5 s timeout is logged; no duplicate later."""
    gateway = await started(make_gateway)
    before = stored(gateway.workspace)
    deliver = fake_telegram._api_sendMessage
    held, given_up = asyncio.Event(), asyncio.Event()

    async def slow_send(params: dict[str, Any]) -> Any:
        if held.is_set():
            return await deliver(params)
        held.set()
        # Telegram takes the message, but its answer comes after python-telegram-bot's 5 s
        # timeout (if the client is still there): sending it again would show it twice.
        answer = await deliver(params)
        await given_up.wait()
        return answer

    fake_telegram._api_sendMessage = slow_send  # type: ignore[method-assign]
    fake_telegram.message("answer into a timeout", chat_id=CHAT, user_id=CHAT)
    await until(lambda: "telegram send failed" in gateway.log(), 30, "the timeout in the log")
    given_up.set()
    assert "Timed out" in gateway.log()
    await survives(gateway)
    # Its done line is written once the send is given up: no second send of it can follow.
    await until(lambda: not telegram_inbox_pending(gateway.state_dir), 10, "the inbox done line")
    sent = [p.get("plain") for p in fake_telegram.sent(CHAT)]
    assert sent.count("echo: answer into a timeout") == 1
    assert_intact(before, gateway.workspace)
