"""The endpoint profile, against the fake LLM running one request at a time as llama-cpp-python's
server does: replies go ahead of a queued consolidation, llm.timeout counts from the moment a
request is sent (not while it waits its turn), the server's slot count is read where it says,
and memory.llm sends consolidation to an endpoint of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.llm.gate import EndpointGate, GatedProvider, Priority
from gateway.llm.server_info import Concurrency, read_profile
from gateway.service.app import Runtime
from memory.consolidation.consolidator import Job
from tests.conftest import RuntimeFactory, inbound, memgate, turns
from tests.fakes.llm import (
    FakeLLM,
    is_consolidation,
    last_user_text,
    start_fake_llm,
    text,
    tool_call,
)

pytestmark = pytest.mark.timeout(60)

ONE_AT_A_TIME = {"llm": {"max_concurrency": 1}}


def gated(runtime: Runtime) -> GatedProvider:
    assert isinstance(runtime.provider, GatedProvider)
    return runtime.provider


def asked(text_of: str) -> Callable[[dict[str, Any]], bool]:
    """Matches the chat request whose last user message is `text_of`."""
    return lambda body: not is_consolidation(body) and last_user_text(body) == text_of


async def until(check: Callable[[], bool], within: float = 10.0) -> None:
    """Until `check()` holds: the gate's queue has no event to await, so it is looked at often."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def order(fake: FakeLLM) -> list[str]:
    """What the server ran, in order: each chat request's message, or "consolidation"."""
    return ["consolidation" if is_consolidation(r) else last_user_text(r) for r in fake.served]


async def test_a_reply_goes_ahead_of_a_consolidation_queued_before_it(
    fake_llm: FakeLLM, make_runtime: RuntimeFactory
) -> None:
    """One request at a time: a consolidation asked while a reply runs waits, and a reply asked
    after it is sent first once the running one ends."""
    fake_llm.single_slot = True
    async with make_runtime(ONE_AT_A_TIME) as runtime:
        await turns(runtime, 2, chat_id="1")
        [key] = runtime.sessions.keys()
        held = asyncio.Event()
        fake_llm.push(text("first answer"), hold=held, match=asked("first"))
        first = asyncio.create_task(runtime.agent.handle(inbound("first", "2")))
        await fake_llm.wait_for(lambda: fake_llm.in_flight == 1)
        gate = gated(runtime).gate
        runtime.consolidator.enqueue(Job(key, key, everything=True))
        # Asked of the endpoint: waiting at memgate's gate, or (without one) in the server's queue.
        await until(lambda: gate.waiting == 1 or bool(fake_llm.consolidation_requests()))
        second = asyncio.create_task(runtime.agent.handle(inbound("second", "3")))
        await until(lambda: gate.waiting == 2 or len(fake_llm.requests) == 5)
        held.set()
        replies = await asyncio.gather(first, second)
        await runtime.consolidator.wait_idle()
    assert [reply.text for reply in replies if reply is not None] == [
        "first answer",
        "echo: second",
    ]
    assert order(fake_llm)[2:] == ["first", "second", "consolidation"]


async def test_a_reply_that_called_a_tool_keeps_its_place_for_its_next_request(
    fake_llm: FakeLLM, make_runtime: RuntimeFactory
) -> None:
    """One request at a time: a consolidation queued while a reply's request runs does not take
    the place while the reply's tool runs; the reply's next request goes first."""
    fake_llm.single_slot = True
    async with make_runtime(ONE_AT_A_TIME) as runtime:
        await turns(runtime, 2, chat_id="1")
        [key] = runtime.sessions.keys()
        held = asyncio.Event()
        fake_llm.push(tool_call("read_file", {"path": "USER.md"}), hold=held, match=asked("look"))
        reply = asyncio.create_task(runtime.agent.handle(inbound("look", "2")))
        await fake_llm.wait_for(lambda: fake_llm.in_flight == 1)
        gate = gated(runtime).gate
        runtime.consolidator.enqueue(Job(key, key, everything=True))
        await until(lambda: gate.waiting == 1 or bool(fake_llm.consolidation_requests()))
        held.set()
        answer = await reply
        await runtime.consolidator.wait_idle()
    assert answer is not None and answer.text == "echo: look"
    assert order(fake_llm)[2:] == ["look", "look", "consolidation"]


async def test_the_timeout_counts_from_sending_not_from_waiting_for_a_turn(
    fake_llm: FakeLLM, make_runtime: RuntimeFactory
) -> None:
    """Two replies of 1.2 s each on a one-at-a-time server with llm.timeout 2: the second waits
    1.2 s for its turn and still gets its answer (its 2 s count from when it is sent)."""
    fake_llm.single_slot = True
    fake_llm.push(text("first answer"), delay=1.2, match=asked("first"))
    fake_llm.push(text("second answer"), delay=1.2, match=asked("second"))
    async with make_runtime({"llm": {"max_concurrency": 1, "timeout": 2}}) as runtime:
        first = asyncio.create_task(runtime.agent.handle(inbound("first", "1")))
        await fake_llm.wait_for_requests(1, "chat")
        second = asyncio.create_task(runtime.agent.handle(inbound("second", "2")))
        replies = await asyncio.gather(first, second)
    assert [reply.text for reply in replies if reply is not None] == [
        "first answer",
        "second answer",
    ]


async def test_the_slot_count_a_server_gives_sets_the_limit(
    fake_llm: FakeLLM, make_runtime: RuntimeFactory
) -> None:
    """llm.max_concurrency auto: llama.cpp's /props total_slots is the limit."""
    fake_llm.props_slots = 1
    async with make_runtime() as runtime:
        await turns(runtime, 1)
        concurrency = gated(runtime).gate.concurrency
    assert concurrency is not None
    assert (concurrency.limit, concurrency.source) == (1, "server's /props")


async def test_llama_cpp_pythons_server_is_taken_as_one_request_at_a_time(
    fake_llm: FakeLLM, make_runtime: RuntimeFactory
) -> None:
    """llama-cpp-python's server (its API titled so, its models owned_by "me") runs one request
    at a time; the runtime's gate knows it from the title alone (its model list waits for a busy
    slot); a server that says nothing gets no slot count."""
    plain = await read_profile(fake_llm.url, "")
    fake_llm.models_owned_by = "me"
    owned = await read_profile(fake_llm.url, "")
    fake_llm.models_owned_by = "fake"
    fake_llm.openapi_title = "🦙 llama.cpp Python API"
    async with make_runtime() as runtime:
        await turns(runtime, 1)
        concurrency = gated(runtime).gate.concurrency
    assert plain.slots is None and plain.models == ("fake",)
    assert owned.slots == 1 and "llama-cpp-python" in owned.slots_source
    assert concurrency is not None and concurrency.limit == 1
    assert concurrency.source == "llama-cpp-python's server runs one at a time"


async def test_memory_llm_sends_consolidation_to_its_own_endpoint(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """With memory.llm, the agent keeps to llm's endpoint and model, and consolidation, in the
    gateway and in `memgate memory consolidate`, goes to memory.llm's with its model and key."""
    other, runner = await start_fake_llm()
    try:
        config = tmp_path / "config.yaml"
        config.write_text(
            f"""\
workspace: {tmp_path / "workspace"}
state_dir: {tmp_path / "state"}
llm:
  base_url: {fake_llm.url}
  api_key: sk-chat-key-0123456789
  model: chat-model
  max_retries: 0
  timeout: 5
memory:
  llm:
    base_url: {other.url}
    api_key: sk-memory-key-0123456789
    model: memory-model
"""
        )
        code, out, err = await memgate(
            "chat", "-m", "hello", "--config", str(config), home=tmp_path
        )
        assert code == 0, out + err
        code, out, err = await memgate(
            "memory", "consolidate", "--all", "--config", str(config), home=tmp_path
        )
        assert code == 0, out + err
    finally:
        await runner.cleanup()
    assert fake_llm.chat_requests() and not fake_llm.consolidation_requests()
    assert {r["model"] for r in fake_llm.requests} == {"chat-model"}
    [consolidation] = other.consolidation_requests()
    assert consolidation["model"] == "memory-model"
    assert consolidation["_headers"]["authorization"] == "Bearer sk-memory-key-0123456789"
    assert not other.chat_requests()


async def test_a_request_given_up_while_it_waits_leaves_its_turn_to_the_next() -> None:
    """A reply cancelled (a /stop) while it waits takes no place: the consolidation behind it
    goes next, and once all are done the gate admits at once again."""

    async def one() -> Concurrency:
        return Concurrency(1, "test")

    gate = EndpointGate(one)
    ran: list[str] = []
    release = asyncio.Event()

    async def request(name: str, priority: Priority, hold: asyncio.Event | None = None) -> None:
        async with gate.slot(priority):
            ran.append(name)
            if hold is not None:
                await hold.wait()

    first = asyncio.create_task(request("first", Priority.REPLY, release))
    await until(lambda: ran == ["first"])
    background = asyncio.create_task(request("consolidation", Priority.BACKGROUND))
    stopped = asyncio.create_task(request("stopped reply", Priority.REPLY))
    await until(lambda: gate.waiting == 2)
    stopped.cancel()
    await asyncio.gather(stopped, return_exceptions=True)
    release.set()
    await asyncio.gather(first, background)
    async with asyncio.timeout(1):
        await request("later", Priority.BACKGROUND)
    assert ran == ["first", "consolidation", "later"]
    assert gate.waiting == 0
