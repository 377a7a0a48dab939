"""Token counts that fit the model: against a fake server whose tokenizer is three times denser
than memgate's count, memgate learns the ratio (from usage and /tokenize), keeps it in the state
folder, retries a context-length refusal once with a smaller prompt, and never leaves a chat stuck
on its own history."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.cli.status import describe_budget
from gateway.llm.server_tokens import ContextOverflow, context_overflow
from memory.calibration import TokenCalibration
from tests.conftest import RuntimeFactory, inbound
from tests.fakes.llm import FakeLLM, text

# A local model of 16,384 tokens with short answers: memgate's budget is 15,104 of its own tokens,
# about 4,500 of which make 16,384 of the dense server's (the system prompt and the tool schemas
# alone are some 1,500).
CONTEXT = 16384
LOCAL = {"llm": {"context_window": CONTEXT, "max_tokens": 256}, "memory": {"window": 1000}}
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank. "


def _dense(fake: FakeLLM, *, context: int = CONTEXT, tokenize: bool = False) -> None:
    fake.token_density = 3.0
    fake.context_size = context
    fake.tokenize_endpoint = tokenize


def _history(pairs: int = 40, sentences: int = 6) -> list[dict[str, Any]]:
    """`pairs` exchanges of about 14 of memgate's tokens a sentence (some 48 by the dense
    server): 7,000 and 24,000 in all."""
    said: list[dict[str, Any]] = []
    for index in range(pairs):
        said.append({"role": "user", "content": f"{index}: " + SENTENCE * sentences})
        said.append({"role": "assistant", "content": f"noted {index}. " + SENTENCE * sentences})
    return said


def _calibration(state_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((state_dir / "token-calibration.json").read_text())
    return data


async def test_the_ratio_is_learnt_from_usage_and_kept_in_the_state_folder(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Usage three times memgate's count is learnt as a ratio near 3, written to the state
    folder, and a fresh process sizes its prompts with it (and /status says so)."""
    _dense(fake_llm, context=0)  # no limit: only usage teaches
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        await runtime.sessions.add_messages(session, _history(12))
        for word in ("one", "two", "three"):
            reply = await runtime.agent.handle(inbound(word))
            assert reply is not None and not reply.failed
            await runtime.agent.fitter.settle()  # learnt beside the reply, not before it
        base = runtime.config.llm.budget
        assert runtime.agent.budget.limit < base / 2
    model = _calibration(runtime.config.state_dir)["models"]["gpt-4o-mini"]
    assert 2.0 < model["ratio"] <= 4.0
    async with make_runtime(LOCAL) as again:
        assert again.agent.budget.limit < base / 2
        status = await again.agent.handle(inbound("/status"))
        assert status is not None
        counted = again.agent.budget.limit
        assert f"Prompt budget: {base} tokens ({counted} by memgate's" in status.text
        assert f"budget:     {base} prompt tokens ({counted} by" in describe_budget(again.config)


async def test_a_context_refusal_is_retried_with_a_smaller_prompt_and_answered(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """History within memgate's budget but over the server's context gets the server's
    400; the turn asks once more with the prompt cut to fit, and the answer comes back."""
    _dense(fake_llm)
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        await runtime.sessions.add_messages(session, _history())
        reply = await runtime.agent.handle(inbound("what did I say?"))
        assert reply is not None and not reply.failed, reply
        assert reply.text == "echo: what did I say?"
        first, second = fake_llm.chat_requests()
        assert fake_llm.prompt_tokens(first) > CONTEXT
        assert fake_llm.prompt_tokens(second) <= CONTEXT - 256
        assert second["messages"][-1] == first["messages"][-1]  # the same question
    assert fake_llm.context_refusals == 1


async def test_a_chat_that_hit_a_context_refusal_answers_its_next_message(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """After a context-length 400, the chat's next messages (and those after a restart) are
    sent within the server's context at once: no second refusal, every one answered."""
    _dense(fake_llm)
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        await runtime.sessions.add_messages(session, _history())
        await runtime.agent.handle(inbound("first"))
        assert fake_llm.context_refusals == 1
        for word in ("second", "third"):
            reply = await runtime.agent.handle(inbound(word + " " + SENTENCE * 8))
            assert reply is not None and not reply.failed, reply
    async with make_runtime(LOCAL) as again:
        reply = await again.agent.handle(inbound("after a restart"))
        assert reply is not None and reply.text == "echo: after a restart"
    assert fake_llm.context_refusals == 1
    for request in fake_llm.chat_requests()[2:]:
        assert fake_llm.prompt_tokens(request) <= CONTEXT


async def test_consolidation_asks_for_no_more_than_the_servers_context_leaves(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """Once the ratio is learnt, consolidation's calls (sized by the same budget) fit the
    server's context with the answer they ask room for, counted as the server counts."""
    _dense(fake_llm)
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        await runtime.sessions.add_messages(session, _history())
        reply = await runtime.agent.handle(inbound("hello"))
        assert reply is not None and reply.text == "echo: hello"
        await runtime.consolidator.wait_idle()
        calls = fake_llm.consolidation_requests()
        assert calls and runtime.consolidator.failures_total == 0
        for call in calls:
            assert fake_llm.prompt_tokens(call) + call["max_tokens"] <= CONTEXT


async def test_the_server_tokenizer_calibrates_before_the_first_refusal(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A server with /tokenize is asked once at first contact: the first request already fits
    its context, and the ratio is kept."""
    _dense(fake_llm, tokenize=True)
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        await runtime.sessions.add_messages(session, _history())
        for word in ("hello", "again"):
            reply = await runtime.agent.handle(inbound(word))
            assert reply is not None and reply.text == f"echo: {word}"
    assert len(fake_llm.tokenize_requests) == 1
    assert fake_llm.context_refusals == 0
    model = _calibration(runtime.config.state_dir)["models"]["gpt-4o-mini"]
    assert 2.0 < model["ratio"] <= 4.0


async def test_the_tokenizer_call_waits_its_turn_at_a_one_slot_server(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """With one request at a time to the endpoint, the tokenizer call waits for the request in
    flight (llama-cpp-python would cut that one's stream) instead of arriving beside it."""
    _dense(fake_llm, tokenize=True)
    async with make_runtime({**LOCAL, "llm": {**LOCAL["llm"], "max_concurrency": 1}}) as runtime:
        gate = runtime.provider.gate  # type: ignore[attr-defined]
        release = asyncio.Event()
        fake_llm.push(text("held"), hold=release)
        async with asyncio.TaskGroup() as group:
            held = group.create_task(runtime.provider.chat([{"role": "user", "content": "x"}]))
            await fake_llm.wait_for_requests(1)
            turn = group.create_task(runtime.agent.handle(inbound("hello")))
            # The gate's queue has no event to wait on: looked at until the tokenizer call (or,
            # had it not waited, the turn's request after it) waits there.
            async with asyncio.timeout(10):
                while gate.waiting < 1:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            release.set()
        assert held.result().content == "held"
        reply = turn.result()
        assert reply is not None and reply.text == "echo: hello"
    assert [r["_in_flight"] for r in fake_llm.tokenize_requests] == [0]


async def test_a_server_without_tokenize_is_fine(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A server that answers /tokenize with 404 is asked once, and the chat goes on as usual:
    the refusal, then the answer."""
    _dense(fake_llm, tokenize=False)
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        await runtime.sessions.add_messages(session, _history())
        for word in ("hello", "again"):
            reply = await runtime.agent.handle(inbound(word))
            assert reply is not None and reply.text == f"echo: {word}"
    assert len(fake_llm.tokenize_requests) == 1
    assert fake_llm.context_refusals == 1


class Shown:
    """A ReplyStream that keeps the text a channel would show."""

    def __init__(self) -> None:
        self.text = ""

    async def write(self, piece: str) -> None:
        self.text += piece

    async def status(self, note: str) -> None:
        pass


async def test_a_streamed_turn_is_retried_after_a_context_refusal_too(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """A streamed turn refused for its context is asked again within the smaller budget: the
    answer is shown once and stored."""
    _dense(fake_llm)
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        await runtime.sessions.add_messages(session, _history())
        shown = Shown()
        reply = await runtime.agent.handle(inbound("stream it"), shown)
        assert reply is not None and reply.text == "echo: stream it", reply
        assert shown.text == "echo: stream it"
        assert fake_llm.prompt_tokens(fake_llm.chat_requests()[-1]) <= CONTEXT
        session = await runtime.sessions.get("test:42")
        assert session.messages[-1]["content"] == "echo: stream it"


@pytest.mark.parametrize(
    ("message", "prompt", "room"),
    [
        # llama-cpp-python and vLLM: the prompt and the answer asked for.
        (
            "This model's maximum context length is 4096 tokens. However, you requested 4399 "
            "tokens (4143 in the messages, 256 in the completion). Please reduce the length of "
            "the messages or completion.",
            4143,
            3840,
        ),
        # OpenAI.
        (
            "This model's maximum context length is 4096 tokens. However, your messages "
            "resulted in 4143 tokens. Please reduce the length of the messages.",
            4143,
            4095,
        ),
        # llama.cpp's engine.
        ("Requested tokens (4143) exceed context window of 4096", 4143, 4095),
        # vLLM, newer.
        (
            "This model's maximum context length is 4096 tokens. However, your request has "
            "4143 input tokens. Please reduce the length of the input messages.",
            4143,
            4095,
        ),
        # vLLM, an answer that does not fit beside the prompt.
        (
            "'max_tokens' is too large: 256. This model's maximum context length is 4096 tokens "
            "and your request has 4000 input tokens (256 > 4096 - 4000).",
            4000,
            3840,
        ),
        # llama.cpp's server.
        (
            "request (4143 tokens) exceeds the available context size (4096 tokens), try "
            "increasing it",
            4143,
            4095,
        ),
        # llama.cpp's server before it named the numbers.
        (
            "the request exceeds the available context size, try increasing it",
            None,
            None,
        ),
    ],
)
def test_context_refusals_are_read_as_the_servers_word_them(
    message: str, prompt: int | None, room: int | None
) -> None:
    """Each server's wording of a context-length 400 gives the prompt's count and the room."""
    assert context_overflow(400, f"HTTP 400: {message}") == ContextOverflow(prompt, room)


def test_other_refusals_are_not_context_refusals() -> None:
    """A 400 about something else, or another status, is not read as an overflow."""
    assert context_overflow(400, "HTTP 400: stream_options is not supported") is None
    assert context_overflow(500, "maximum context length is 4096 tokens") is None


def test_the_ratio_is_bounded_smoothed_and_kept_per_model(tmp_path: Path) -> None:
    """Never below 1.0 nor above 4.0; usage moves it part of the way; a short prompt teaches
    nothing; the file keeps each model's entry."""
    path = tmp_path / "token-calibration.json"
    calibration = TokenCalibration(path, "small")
    assert calibration.scaled(3000) == 3000 and not calibration.learnt
    assert not calibration.observe(counted=10, reported=30)  # mostly the chat template
    assert calibration.observe(counted=1000, reported=500)  # fewer tokens: still 1.0
    assert calibration.ratio == 1.0
    calibration.observe(counted=1000, reported=3000)
    assert 1.0 < calibration.ratio < 2.0  # part of the way to 3
    calibration.observe(counted=1000, reported=99000)
    assert calibration.ratio <= 4.0
    calibration.save()
    other = TokenCalibration(path, "big")
    other.refused(counted=1000, reported=2000, room=3840)
    other.save()
    assert other.ratio == pytest.approx(2.1)
    assert other.scaled(100_000) == int(3840 * 0.95 / 2.1)
    again = TokenCalibration(path, "small")
    assert again.ratio == pytest.approx(calibration.ratio, abs=1e-3) and again.learnt
    assert set(json.loads(path.read_text())["models"]) == {"small", "big"}


async def test_a_message_bigger_than_the_context_is_cut_for_consolidation_not_kept_raw(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """One message longer than the server's whole context (a pasted file) is cut in the
    consolidation prompt, its start and end kept and the cut named, so its chunk is
    consolidated within the context instead of refused three times and archived raw; the
    session file keeps the message whole."""
    _dense(fake_llm)
    pasted = "START " + "0123456789 " * 6000 + " END"  # ~66,000 bytes: ~49,000 dense tokens
    async with make_runtime(LOCAL) as runtime:
        session = await runtime.sessions.get("test:42")
        history = _history(20)
        history[10] = {"role": "user", "content": pasted}
        await runtime.sessions.add_messages(session, history)
        reply = await runtime.agent.handle(inbound("hello"))
        assert reply is not None and reply.text == "echo: hello"
        await runtime.consolidator.wait_idle()
        calls = fake_llm.consolidation_requests()
        assert calls and runtime.consolidator.failures_total == 0
        for call in calls:
            assert fake_llm.prompt_tokens(call) + call["max_tokens"] <= CONTEXT
        prompts = "\n".join(json.dumps(call["messages"]) for call in calls)
        assert "too long for one consolidation call: cut here" in prompts
        assert "START" in prompts and "END" in prompts
        history_md = (runtime.config.workspace / "memory" / "HISTORY.md").read_text()
        assert "[RAW]" not in history_md
    stored = (runtime.config.workspace / "sessions").rglob("*.jsonl")
    assert any(pasted in path.read_text() for path in stored)
