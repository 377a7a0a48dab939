"""The budget decides on byte bounds first: every decision equals the one exact counts take."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from memory.budget import Part, PromptBudget
from memory.errors import BudgetError
from memory.sessions.store import Session, SessionStore
from memory.tokens import TokenCounter
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM

COUNTER = TokenCounter("gpt-4o-mini")
# A bound this large never fits a limit, so a budget given it decides everything by counting.
_NEVER = sys.maxsize // 4


class ExactOnly:
    """The real counter with no usable bound: the reference a bound-first budget must match."""

    def count(self, text: str) -> int:
        return COUNTER.count(text)

    def count_message(self, message: dict[str, Any]) -> int:
        return COUNTER.count_message(message)

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        return COUNTER.count_tools(tools)

    def truncate(self, text: str, tokens: int) -> str:
        return COUNTER.truncate(text, tokens)

    def at_most(self, text: str) -> int:
        return _NEVER

    def at_most_message(self, message: dict[str, Any]) -> int:
        return _NEVER

    def at_most_tools(self, tools: list[dict[str, Any]]) -> int:
        return _NEVER


# Words whose tokens-per-byte differ a lot, so byte bounds range from tight to 6x the count.
_WORDS = st.sampled_from(["hello ", "x", "é", "😀", "the cat sat ", "<|endoftext|>", "\n"])
_TEXT = st.lists(_WORDS, max_size=120).map("".join)
_ROLES = st.sampled_from(["user", "assistant"])
_HISTORY = st.lists(st.tuples(_ROLES, _TEXT), min_size=0, max_size=14)
_TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file."}}]


def _session(messages: list[dict[str, Any]]) -> Session:
    """A real session on disk holding `messages` (a fresh store in a temporary folder)."""

    async def build(root: Path) -> Session:
        store = SessionStore(root, UTC)
        session = await store.get("test:1")
        if messages:
            await store.add_messages(session, messages)
        return session

    with tempfile.TemporaryDirectory() as root:
        return asyncio.run(build(Path(root)))


def _outcome(call: Any) -> Any:
    try:
        return call()
    except BudgetError as exc:
        return ("over", exc.needed, exc.limit)


@settings(max_examples=120, deadline=None)
@given(_HISTORY, _TEXT, _TEXT, st.integers(min_value=20, max_value=3000), st.integers(0, 6))
def test_history_window_by_bound_equals_exact(
    said: list[tuple[str, str]], system: str, current: str, limit: int, most: int
) -> None:
    """For random histories and limits, the window (or the over-budget error) is the one exact
    counting gives."""
    session = _session([{"role": role, "content": text} for role, text in said])
    head = [{"role": "system", "content": system}, {"role": "user", "content": current}]
    end = len(session.messages)
    bound_first = PromptBudget(limit, COUNTER)
    exact = PromptBudget(limit, ExactOnly())
    assert _outcome(
        lambda: bound_first.history(session, head, _TOOLS, end=end, max_messages=most)
    ) == _outcome(lambda: exact.history(session, head, _TOOLS, end=end, max_messages=most))


@settings(max_examples=120, deadline=None)
@given(_HISTORY, _TEXT, st.integers(min_value=20, max_value=3000))
def test_fit_by_bound_equals_exact(said: list[tuple[str, str]], system: str, limit: int) -> None:
    """fit() returns the same request (or raises the same error) as with exact counts only."""
    messages = [{"role": "system", "content": system}]
    messages += [{"role": role, "content": text} for role, text in said]
    messages.append({"role": "user", "content": "now"})
    current = len(messages) - 1
    bound_first = PromptBudget(limit, COUNTER)
    exact = PromptBudget(limit, ExactOnly())
    assert _outcome(lambda: bound_first.fit(messages, _TOOLS, current=current)) == _outcome(
        lambda: exact.fit(messages, _TOOLS, current=current)
    )


@settings(max_examples=150, deadline=None)
@example(["hello " * 10], ["the cat sat " * 200], 1000, 0.5)  # the text around takes it all
@given(
    st.lists(_TEXT, min_size=1, max_size=5),
    st.lists(_TEXT, max_size=3),
    st.integers(min_value=40, max_value=3000),
    st.floats(min_value=0.1, max_value=1.0),
)
def test_cap_parts_by_bound_equals_exact(
    texts: list[str], around: list[str], limit: int, share: float
) -> None:
    """The files' shares and cuts are the ones exact counting gives, for random files and limits."""
    parts = [Part(f"file{index}.md", text) for index, text in enumerate(texts)]
    bound_first = PromptBudget(limit, COUNTER, share)
    exact = PromptBudget(limit, ExactOnly(), share)
    assert bound_first.cap_parts(parts, around) == exact.cap_parts(parts, around)


@settings(max_examples=100, deadline=None)
@given(_TEXT, st.integers(min_value=0, max_value=400))
def test_cap_text_by_bound_equals_exact(text: str, share: int) -> None:
    """A document's text is cut (or kept whole) as exact counting decides."""
    part = Part("doc.txt", text)
    bound_first = PromptBudget(1000, COUNTER)
    exact = PromptBudget(1000, ExactOnly())
    assert bound_first.cap_text(part, share) == exact.cap_text(part, share)


def test_a_window_that_fits_by_bytes_is_decided_without_counting() -> None:
    """When even the byte bounds fit, the window is chosen by them alone (no count is asked)."""
    session = _session([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    head = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "and?"}]
    budget = PromptBudget(200, ExactOnly())  # would count: stands in for "no bound"
    assert budget.history_by_bound(session, head, [], end=2) is None
    budget = PromptBudget(200, COUNTER)
    window = budget.history_by_bound(session, head, [], end=2)
    assert window == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    # Over by bytes: only counting can tell.
    assert PromptBudget(20, COUNTER).history_by_bound(session, head, [], end=2) is None


async def test_the_size_rule_counts_exactly_where_bytes_reach_it(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A session at the consolidation threshold by bytes but far below it in tokens is counted
    exactly after its turn (which itself fit by bytes) and is not consolidated."""
    async with make_runtime({"llm": {"context_window": 64000, "max_tokens": 1024}}) as runtime:
        await runtime.agent.handle(inbound("hi"))
        await runtime.consolidator.wait_idle()
        assert not runtime.counter.loaded
        budget = runtime.agent.budget
        system = fake_llm.chat_requests()[0]["messages"][0]
        session = await runtime.sessions.get("test:42")
        said = [*session.messages]
        # Filler of ~200 tokens and ~1,000 bytes a message, up to 2,000 bytes past the threshold.
        threshold = 0.75 * budget.limit
        while budget.at_most([system, *said]) < threshold + 2000:
            said.append({"role": "user", "content": "word " * 200})
            said.append({"role": "assistant", "content": "noted " * 166})
        await runtime.sessions.add_messages(session, said[len(session.messages) :])
        reply = await runtime.agent.handle(inbound("and now?"))
        assert reply is not None and reply.text == "echo: and now?"
        await runtime.consolidator.wait_idle()
        assert runtime.counter.loaded
        assert fake_llm.consolidation_requests() == []
        exact = budget.size([system, *session.messages])
        assert exact < threshold <= budget.at_most([system, *session.messages])
        assert len(fake_llm.chat_requests()[-1]["messages"]) == len(session.messages)


async def test_a_long_backlog_that_fits_by_bytes_is_sent_without_counting(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """600 short unconsolidated messages (sized in a worker thread, not on the event loop) fit
    by bytes: all are sent and the vocabulary is not built."""
    async with make_runtime({"memory": {"window": 1000}}) as runtime:
        session = await runtime.sessions.get("test:42")
        said = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"short line {i}"}
            for i in range(600)
        ]
        await runtime.sessions.add_messages(session, said)
        reply = await runtime.agent.handle(inbound("still there?"))
        assert reply is not None and reply.text == "echo: still there?"
        await runtime.consolidator.wait_idle()
        sent = fake_llm.chat_requests()[0]["messages"]
        assert [m["content"] for m in sent[1:-1]] == [m["content"] for m in said]
        assert not runtime.counter.loaded


async def test_the_size_rule_counts_the_tool_schemas_every_request_carries(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A session whose prompt reaches the consolidation threshold only with its tool schemas
    counted is consolidated: the rule sees the request the next turn will send."""
    config = {"llm": {"context_window": 8000, "max_tokens": 1024}, "memory": {"window": 1000}}
    async with make_runtime(config) as runtime:
        await runtime.agent.handle(inbound("hi"))
        await runtime.consolidator.wait_idle()
        first = fake_llm.chat_requests()[0]
        system, tools = first["messages"][0], first["tools"]
        budget = runtime.agent.budget
        threshold = 0.75 * budget.limit
        session = await runtime.sessions.get("test:42")
        said = [*session.messages]
        while budget.size([system, *said], tools) < threshold:
            said.append({"role": "user", "content": "a few words " * 10})
            said.append({"role": "assistant", "content": "noted"})
        await runtime.sessions.add_messages(session, said[len(session.messages) :])
        await runtime.agent.handle(inbound("and now?"))
        await runtime.consolidator.wait_idle()
        assert budget.size([system, *session.messages]) < threshold  # not without the tools
        assert fake_llm.consolidation_requests() != []


async def test_a_consolidation_that_fits_by_bytes_builds_no_vocabulary(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Short turns past a small window are consolidated with chunks sized by bytes (they fit
    the call whole, as by tokens): the vocabulary is never built."""
    async with make_runtime({"memory": {"window": 6}}) as runtime:
        for index in range(8):
            await runtime.agent.handle(inbound(f"message {index}"))
        await runtime.consolidator.wait_idle()
        session = await runtime.sessions.get("test:42")
        assert len(fake_llm.consolidation_requests()) >= 1
        assert session.last_consolidated > 0
        assert session.messages[session.last_consolidated]["role"] == "user"
        assert not runtime.counter.loaded


def test_remembered_bounds_are_those_of_the_message_and_of_the_tool_list_asked_about() -> None:
    """A session keeps each message's bound and the counter each tool list's: asked again, the
    same figures; another list (a scope with other tools) gets its own."""
    said = [{"role": "user", "content": "hello " * n} for n in (1, 50, 3)]
    session = _session(said)
    for _ in range(2):
        assert [session.bound(i, COUNTER) for i in range(3)] == [
            COUNTER.at_most_message(m) for m in session.messages
        ]
    counter = TokenCounter("gpt-4o-mini")
    more = [*_TOOLS, {"type": "function", "function": {"name": "write_file"}}]
    for tools in (_TOOLS, more, _TOOLS, more):
        assert counter.at_most_tools(tools) == len(json.dumps(tools, ensure_ascii=False))
