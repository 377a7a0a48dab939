"""The conversations each figure plays, written once for both systems (stdlib only).

A driver hands these an `ask(chat_id, text) -> reply` coroutine bound to its system's own entry
point, so memgate and nanobot receive byte-identical messages in the same order and timing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.protocol import FakeControl, message_text, now_ms

Ask = Callable[[str, str], Awaitable[str]]

WARMUP_TURNS = 3


async def warm_up(ask: Ask) -> None:
    """A few turns on a throw-away chat, so connection pools and lazy imports are ready."""
    for index in range(WARMUP_TURNS):
        await ask("warmup", message_text(index, 20))


async def concurrent_chats(
    ask: Ask, sessions: int, turns: int, rounds: int = 1, words: int = 20
) -> dict[str, Any]:
    """Figure a: `sessions` chats at once, each sending `turns` messages one after another.

    With `rounds` > 1 this is repeated with fresh chats, adding to the same samples.
    """
    latencies: list[float] = []

    async def chat(name: str, seed: int) -> None:
        for turn in range(turns):
            started = now_ms()
            await ask(name, message_text(seed + turn, words))
            latencies.append(now_ms() - started)

    started = time.perf_counter()
    for number in range(rounds):
        async with asyncio.TaskGroup() as group:
            for session in range(sessions):
                group.create_task(chat(f"a{number}-{session}", session * 1000))
    return {"latencies_ms": latencies, "wall_s": time.perf_counter() - started}


HISTORY_VARIANTS = ("consolidated", "whole")  # figure b: all but the last 10 consolidated, or none


async def history_case(ask: Ask, turns: int, count: int) -> dict[str, Any]:
    """Figure b on a started system: warm-up turns on another chat, then the first turn on the
    stored chat (it loads the file: cold) and `turns` more (warm)."""
    await warm_up(ask)
    cold = await timed_turns(ask, "hist", 1, count)
    warm = await timed_turns(ask, "hist", turns, count + 1)
    return {"cold_ms": cold[0], "turn_ms": warm}


async def timed_turns(ask: Ask, chat_id: str, count: int, first: int) -> list[float]:
    """Figure b: latency of `count` turns in one chat, one after another."""
    latencies = []
    for index in range(first, first + count):
        started = now_ms()
        await ask(chat_id, message_text(index, 30))
        latencies.append(now_ms() - started)
    return latencies


def history_messages(count: int) -> list[dict[str, Any]]:
    """Figure b: `count` stored messages (user/assistant pairs, ~200 characters each)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    messages = []
    for index in range(count):
        text = message_text(index, 30)
        role = "user" if index % 2 == 0 else "assistant"
        stamp = (start + timedelta(seconds=30 * index)).isoformat(timespec="seconds")
        content = text if role == "user" else f"echo: {text}"
        messages.append({"role": role, "content": content, "timestamp": stamp})
    return messages


async def until_held(
    ask: Ask, plain: Ask, control: FakeControl, hold: float, max_turns: int, samples: int = 5
) -> dict[str, Any]:
    """Figure c: the same chat played in lockstep on two instances of one system in one process:
    `ask` consolidates after a few turns, `plain` never does (its window is too large).

    After each pair of turns the systems get 300 ms to start consolidating. Once `ask`'s call is
    held at the fake, up to `samples` further turns are timed on both, as long as the call is
    still held (a system that waits for it gets one). Same process, same moment, same prompts:
    only the held consolidation differs.
    """
    await asyncio.to_thread(control.hold_next_consolidation, hold)
    for turn in range(max_turns):
        await ask("held", message_text(turn, 60))
        await plain("held", message_text(turn, 60))
        if await _consolidation_held(control, within=0.3):
            held: list[float] = []
            baseline: list[float] = []
            for index in range(turn + 1, turn + 1 + samples):
                if held and not (await asyncio.to_thread(control.stats))["held"]:
                    break
                held.append(await _timed(ask, message_text(index, 60)))
                baseline.append(await _timed(plain, message_text(index, 60)))
            return {"held_ms": held, "plain_ms": baseline, "held_turn": turn + 2}
    raise RuntimeError(f"no consolidation started within {max_turns} turns")


async def _timed(ask: Ask, text: str) -> float:
    started = now_ms()
    await ask("held", text)
    return now_ms() - started


async def _consolidation_held(control: FakeControl, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        stats = await asyncio.to_thread(control.stats)
        if stats["held"] > 0:
            return True
        await asyncio.sleep(0.01)
    return False


async def one_turn_each(ask: Ask, sessions: int, workers: int = 16) -> float:
    """Figure e: `sessions` chats each send one message, `workers` at a time; returns seconds."""
    numbers = iter(range(sessions))

    async def worker() -> None:
        for number in numbers:
            await ask(f"e{number}", message_text(number, 20))

    started = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for _ in range(workers):
            group.create_task(worker())
    return time.perf_counter() - started


async def long_chat(ask: Ask, turns: int) -> float:
    """Figure f: one chat of `turns` turns of ~80-token messages; returns seconds."""
    started = time.perf_counter()
    for turn in range(turns):
        await ask("long", message_text(turn, 60))
    return time.perf_counter() - started


async def round_trips(call: Callable[[str], Awaitable[None]], count: int) -> list[float]:
    """Figure a's floor: latency of `count` bare LLM calls, one after another."""
    latencies = []
    for index in range(count):
        started = now_ms()
        await call(message_text(index, 20))
        latencies.append(now_ms() - started)
    return latencies
