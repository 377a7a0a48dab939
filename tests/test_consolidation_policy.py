"""Consolidation policy with plain values (memory/consolidation/chunking.py), and chunks sized as they are sent."""

from __future__ import annotations

import itertools
import math
from datetime import UTC
from pathlib import Path
from typing import Any

from memory.consolidation.chunking import (
    KEEP_TURNS,
    Trigger,
    keep_from,
    split,
    target,
    user_boundary,
)
from memory.consolidation.consolidator import Job
from memory.consolidation.summariser import save_memory_tool
from memory.sessions.store import SessionStore
from tests.conftest import RuntimeFactory, inbound, markers
from tests.fakes.llm import FakeLLM


def turns(count: int) -> list[dict[str, Any]]:
    """`count` complete turns, user then assistant."""
    messages: list[dict[str, Any]] = []
    for index in range(count):
        messages += [
            {"role": "user", "content": f"q{index}"},
            {"role": "assistant", "content": f"a{index}"},
        ]
    return messages


def test_the_window_keeps_half_and_cuts_at_the_next_user_message() -> None:
    """window 6 over 7 messages: consolidate up to 7 - 3 = 4, which is a user message."""
    messages = [*turns(3), {"role": "user", "content": "q3"}]
    trigger = Trigger(budget=10_000, window=6)
    assert target(messages, 0, [1] * 7, trigger) == 4
    assert target(messages, 0, [1] * 5, Trigger(budget=10_000, window=8)) is None


def test_the_budget_trigger_keeps_the_newest_turns_under_consolidate_to() -> None:
    """At consolidate_at of the budget, the newest messages that fit consolidate_to are kept."""
    messages = turns(5)
    trigger = Trigger(budget=100, consolidate_at=0.75, consolidate_to=0.5, window=1000)
    sizes = [10] * 10  # 100 tokens, over 75
    assert target(messages, 0, sizes, trigger) == 6  # keeps 4 messages = 40 <= 50, from q3
    assert target(messages, 0, [7] * 10, trigger) is None  # 70 < 75: not due


def test_an_archive_is_consolidated_whole_even_with_a_trailing_user_message() -> None:
    """An archive gets no more turns, so its last unanswered message goes too."""
    messages = [*turns(2), {"role": "user", "content": "left unanswered"}]
    trigger = Trigger(budget=100)
    assert target(messages, 0, [], trigger, everything=True, archive=True) == 5
    assert target(messages, 0, [], trigger, everything=True) == 4  # a live one waits for it


def test_a_running_turn_is_never_cut() -> None:
    """With the newest turn still running (a tool call last), the boundary stops before it."""
    running = [
        *turns(2),
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {}}]},
    ]
    assert user_boundary(running, 5, 0) == 4
    assert user_boundary(turns(2), 4, 0) == 4


def test_chunks_end_at_user_messages_and_a_big_turn_stays_whole() -> None:
    """Pieces stay under the limit at user boundaries; one turn over it is one piece; `most`
    bounds the count."""
    messages = turns(4)
    costs = {index: 3 for index in range(8)}
    costs[3] = 50  # the assistant answer of turn 1 alone is over the limit
    chunks = split(messages, 0, 8, costs.__getitem__, limit=10, most=10)
    assert chunks == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert split(messages, 0, 8, costs.__getitem__, limit=10, most=2) == [(0, 2), (2, 4)]


def test_the_last_chunk_takes_the_whole_turns_its_call_has_room_for() -> None:
    """Due up to 6 with room for 10: two more whole turns go in; a turn that does not fit stays."""
    messages = turns(10)
    reach = keep_from(messages, 0)
    assert reach == 20 - 2 * KEEP_TURNS  # the newest turns are never taken
    assert split(messages, 0, 6, lambda _: 1, limit=10, most=5, reach=reach) == [(0, 10)]
    assert split(messages, 0, 6, lambda _: 1, limit=9, most=5, reach=reach) == [(0, 8)]
    costs = [1] * 20
    costs[7] = 20  # turn 3 alone is over the room left
    assert split(messages, 0, 6, costs.__getitem__, limit=12, most=5, reach=reach) == [(0, 6)]


def test_filling_stops_short_of_the_newest_turns_and_of_a_run_cut_by_most() -> None:
    """Plenty of room takes everything up to the newest KEEP_TURNS turns, never past them; a run
    whose pieces stop before what is due (`most`) takes nothing more."""
    messages = turns(10)
    reach = keep_from(messages, 0)
    assert split(messages, 0, 4, lambda _: 1, limit=1000, most=5, reach=reach) == [(0, reach)]
    assert split(messages, 0, 8, lambda _: 1, limit=4, most=1, reach=reach) == [(0, 4)]
    assert keep_from(turns(KEEP_TURNS - 1), 0) == 0  # fewer turns than are kept: nothing to take


async def test_a_due_run_fills_its_call_and_keeps_the_newest_turns(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Due by a window of 40 messages, one call consolidates all but the newest KEEP_TURNS turns
    rather than only the older half the window asks for."""
    async with make_runtime({"memory": {"window": 40}}) as runtime:
        for index in range(19):
            await runtime.agent.handle(inbound(f"turn {index}"))
        await runtime.consolidator.wait_idle()
        assert fake_llm.consolidation_requests() == []  # 38 messages: under the window
        await runtime.agent.handle(inbound("turn 19"))
        await runtime.consolidator.wait_idle()
        path = runtime.sessions.path_for("test:42")
    assert len(fake_llm.consolidation_requests()) == 1
    assert markers(path) == [40 - 2 * KEEP_TURNS]  # the window alone: 20


async def test_every_consolidation_request_fits_the_agents_budget(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """Chunks are measured with the agent's own PromptBudget: each request fits it, none fails,
    and chunks use the room (all but the last over a third of it)."""
    store = SessionStore(tmp_path / "workspace" / "sessions", UTC)
    session = await store.get("test:42")
    backlog = []
    for index in range(60):
        backlog.append({"role": "user", "content": f"question {index} " + "words " * 60})
        backlog.append({"role": "assistant", "content": f"answer {index} " + "more " * 60})
    await store.add_messages(session, backlog)
    overrides = {"llm": {"context_window": 6144, "max_tokens": 1024}, "memory": {"window": 1000}}
    async with make_runtime(overrides) as runtime:
        memory_md = runtime.memory.memory_md
        memory_md.write_text(memory_md.read_text() + "- a fact worth keeping\n" * 150)
        await runtime.agent.handle(inbound("one more question"))
        await runtime.consolidator.wait_idle()
        budget = runtime.consolidator.budget
        assert budget is runtime.agent.budget  # one budget object, shared with the agent
        assert runtime.consolidator.failures_total == 0
        requests = fake_llm.consolidation_requests()
        assert len(requests) >= 2
        sizes = [budget.size(r["messages"], [save_memory_tool(with_memory=True)]) for r in requests]
    assert all(size <= budget.limit for size in sizes)
    assert all(size > budget.limit / 3 for size in sizes[:-1])


def test_a_long_backlog_takes_as_few_calls_as_turn_boundaries_allow() -> None:
    """A 300-turn backlog's chunks fit, end at user messages and close only when the next turn
    would not fit: their count is within one of total ÷ room."""
    sizes = [(7 * index) % 23 + 5 for index in range(600)]  # 5 to 27 "tokens" a message
    messages = turns(300)
    limit = 400
    chunks = split(messages, 0, len(messages), sizes.__getitem__, limit, most=1000)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(messages)
    assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(chunks))
    assert all(messages[start]["role"] == "user" for start, _ in chunks)
    assert all(sum(sizes[start:stop]) <= limit for start, stop in chunks)
    for start, stop in chunks[:-1]:
        assert sum(sizes[start : stop + 2]) > limit  # the next turn (user + answer) did not fit
    assert abs(len(chunks) - math.ceil(sum(sizes) / limit)) <= 1


async def test_a_turn_stored_while_the_target_is_measured_is_left_for_the_next_run(
    make_runtime: RuntimeFactory,
) -> None:
    """The target is measured in a worker thread while the event loop may store the chat's next
    turns: it is found among the messages there were when it began, however many come meanwhile
    (once an IndexError that failed the job)."""
    overrides = {"memory": {"window": 1000}, "llm": {"context_window": 4096, "max_tokens": 1024}}
    async with make_runtime(overrides) as runtime:
        session = await runtime.sessions.get("test:42")
        backlog = []
        for index in range(20):
            backlog.append({"role": "user", "content": f"question {index} " + "words " * 90})
            backlog.append({"role": "assistant", "content": f"answer {index} " + "more " * 90})
        await runtime.sessions.add_messages(session, backlog)
        count = len(session.messages)
        measure = session.tokens

        def measured_as_turns_arrive(index: int, counter: Any) -> int:
            session.messages.append({"role": "user", "content": "stored meanwhile"})
            session.messages.append({"role": "assistant", "content": "answered meanwhile"})
            return measure(index, counter)

        session.tokens = measured_as_turns_arrive  # type: ignore[method-assign]
        end = runtime.consolidator._target(session, Job(session.key, session.key))
        session.tokens = measure  # type: ignore[method-assign]
    assert end is not None and 0 < end <= count
    assert session.messages[end]["content"].startswith("question")
