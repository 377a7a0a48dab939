"""Soak: the crash and fault runs of tests/resilience at a size no test suite can afford.

`python -m bench.soak` (memgate's venv) SIGKILLs `memgate run` many times while chats keep writing,
then injects random faults into one long-running process, and prints the totals: kills survived,
faults injected, messages sent, answered, kept and lost. Exit status 1 if any promise was broken
(a lost message included). The fakes of tests/fakes stand in for the LLM and the Bot API.

    python -m bench.soak --kills 200 --faults 300 --seed 7 --workdir /tmp/soak
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.llm import (
    FakeLLM,
    Reply,
    error,
    is_consolidation,
    start_fake_llm,
    text,
    tool_call,
)
from tests.fakes.telegram_api import FakeTelegram, start_fake_telegram
from tests.resilience.crash import CrashReport, ScriptedModel, crash_run
from tests.resilience.harness import Gateway, read_session, session_paths

ANSWER_WITHIN = 20.0
ERROR_REPLY = "Sorry,"
SEND_FAILED = "telegram send failed"
TWO_MB = ("All work and no play makes a dull answer. " * 50 + "\n\n") * 960


@dataclass
class FaultTotals:
    """What the fault run did and found."""

    seed: int
    injected: Counter[str] = field(default_factory=Counter)
    messages: int = 0
    answered: int = 0  # the ordinary answer arrived
    told: int = 0  # a short error message arrived instead
    silent: int = 0  # nothing arrived (a failed send is expected to cost its answer)
    lost: list[str] = field(default_factory=list)  # not in any session file
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        kinds = " ".join(f"{kind}={count}" for kind, count in sorted(self.injected.items()))
        return (
            f"seed={self.seed} faults={sum(self.injected.values())} ({kinds}) "
            f"messages={self.messages} answered={self.answered} told_of_error={self.told} "
            f"no_reply={self.silent} lost={len(self.lost)} problems={len(self.problems)}"
        )


def _chat_only(body: dict[str, Any]) -> bool:
    return not is_consolidation(body)


def _held_send(telegram: FakeTelegram, seconds: float) -> None:
    """Hold the next sendMessage past python-telegram-bot's 5 s timeout, then serve it."""
    deliver = type(telegram)._api_sendMessage.__get__(telegram)

    async def slow(params: dict[str, Any]) -> Any:
        telegram._api_sendMessage = deliver  # type: ignore[method-assign]
        await asyncio.sleep(seconds)
        return await deliver(params)

    telegram._api_sendMessage = slow  # type: ignore[method-assign]


Injector = Callable[[FakeLLM, FakeTelegram], None]


def _chat_steps(*replies: Reply) -> Injector:
    """An injector that scripts these model replies, in order, for the next chat turns."""

    def inject(llm: FakeLLM, telegram: FakeTelegram) -> None:
        for reply in replies:
            llm.push(reply, match=_chat_only)

    return inject


FAULTS: dict[str, tuple[int, Injector]] = {  # name: (weight, injector)
    "llm-500": (4, lambda llm, tg: llm.push(error(500, "soak"), match=_chat_only)),
    "llm-429": (4, lambda llm, tg: llm.push(error(429, "soak", retry_after=1), match=_chat_only)),
    "llm-timeout": (2, lambda llm, tg: llm.push(text("late"), delay=3.0, match=_chat_only)),
    "llm-malformed-json": (4, lambda llm, tg: llm.push({"raw": '{"choices": ['}, match=_chat_only)),
    "llm-unknown-tool": (4, _chat_steps(tool_call("no_such_tool", {}), text("no such tool"))),
    "llm-invalid-arguments": (
        4,
        _chat_steps(tool_call("read_file", "{not json"), text("bad arguments")),
    ),
    "llm-2mb-reply": (1, lambda llm, tg: llm.push(text(TWO_MB), match=_chat_only)),
    "telegram-500": (4, lambda llm, tg: tg.fail_next("sendMessage", 500, "Internal Server Error")),
    "telegram-502": (2, lambda llm, tg: tg.fail_next("sendMessage", 502, "Bad Gateway")),
    "telegram-429": (
        3,
        lambda llm, tg: tg.fail_next("sendMessage", 429, "Too Many Requests", retry_after=1),
    ),
    "telegram-timeout": (2, lambda llm, tg: _held_send(tg, 6.0)),
    "none": (4, lambda llm, tg: None),
}


async def fault_run(
    root: Path, llm: FakeLLM, telegram: FakeTelegram, *, rounds: int, seed: int
) -> FaultTotals:
    """One `memgate run` process, `rounds` messages, each after a randomly chosen fault."""
    totals = FaultTotals(seed)
    rng = random.Random(seed)
    llm.default = ScriptedModel()
    gateway = Gateway(
        root,
        llm,
        telegram,
        {"llm": {"timeout": 1.5}, "memory": {"window": 8}},
    )
    names = list(FAULTS)
    weights = [FAULTS[name][0] for name in names]
    sent: list[str] = []
    try:
        await gateway.start()
        for number in range(rounds):
            kind = rng.choices(names, weights)[0]
            FAULTS[kind][1](llm, telegram)
            if kind != "none":
                totals.injected[kind] += 1
            message = f"f{number}"
            before = len(telegram.sent(42))
            telegram.message(message, chat_id=42, user_id=42)
            sent.append(message)
            failed_before = gateway.log().count(SEND_FAILED)
            outcome = await _outcome(gateway, message, before, kind, failed_before)
            if outcome == "answered":
                totals.answered += 1
            elif outcome == "told":
                totals.told += 1
            else:
                totals.silent += 1
            llm.steps.clear()  # a fault the message did not use is not left for the next one
            telegram.failures.clear()
            if not gateway.alive:
                totals.problems.append(f"the process died after {kind}")
                break
        health = await gateway.health()
        if not health or not health["channels"]["telegram"]["connected"]:
            totals.problems.append("unhealthy at the end of the fault run")
        if await gateway.stop() != 0:
            totals.problems.append("the final SIGTERM did not exit 0")
    finally:
        await gateway.close()
    totals.messages = len(sent)
    stored: set[str] = set()
    for path in session_paths(gateway.workspace):
        try:
            stored.update(read_session(path).texts("user"))
        except ValueError as exc:
            totals.problems.append(str(exc))
    totals.lost = [m for m in sent if m not in stored]
    return totals


async def _outcome(gateway: Gateway, message: str, before: int, kind: str, failed: int) -> str:
    """What reached the user: "answered", "told" (a short error reply) or "silent" (the send
    failed for good and the log says so; memgate does not resend a timed-out send, see docs/reliability.md)."""
    patience = 90.0 if kind == "llm-2mb-reply" else ANSWER_WITHIN
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        new = [str(p.get("plain", "")) for p in gateway.telegram.sent(42)[before:]]
        if f"echo: {message}" in new or any(n in ("no such tool", "bad arguments") for n in new):
            return "answered"
        if kind == "llm-2mb-reply" and sum(n.count("dull") for n in new) >= TWO_MB.count("dull"):
            return "answered"
        if any(n.startswith(ERROR_REPLY) for n in new):
            return "told"
        if gateway.log().count(SEND_FAILED) > failed:
            return "silent"
        await asyncio.sleep(0.05)
    return "silent"


async def soak(args: argparse.Namespace, seed: int, workdir: Path) -> int:
    print(f"soak: seed={seed} workdir={workdir} (kept for inspection)", flush=True)
    broken = False
    started = time.monotonic()
    crash: CrashReport | None = None
    faults: FaultTotals | None = None
    if args.kills:
        llm, llm_runner = await start_fake_llm()
        telegram, telegram_runner = await start_fake_telegram()
        try:
            crash = await crash_run(
                workdir / "crash",
                llm,
                telegram,
                kills=args.kills,
                chats=args.chats,
                seed=seed,
                max_repeats=args.max_repeats,
                say=lambda line: print(line, flush=True),
                groups=args.groups,
            )
        finally:
            await telegram_runner.cleanup()
            await llm_runner.cleanup()
        broken |= bool(crash.problems or crash.lost)
    if args.faults:
        llm, llm_runner = await start_fake_llm()
        telegram, telegram_runner = await start_fake_telegram()
        try:
            faults = await fault_run(
                workdir / "faults", llm, telegram, rounds=args.faults, seed=seed
            )
        finally:
            await telegram_runner.cleanup()
            await llm_runner.cleanup()
        print(f"fault run: {faults.summary()}", flush=True)
        for problem in faults.problems[:20]:
            print(f"  problem: {problem}")
        broken |= bool(faults.problems or faults.lost)
    print(f"\ntotals after {time.monotonic() - started:.0f}s (seed {seed}):")
    if crash is not None:
        print(f"  kills survived:     {crash.kills} ({crash.starts} starts)")
        print(
            f"  crash-run messages: {crash.messages} sent, {crash.replies} answered, "
            f"{crash.unanswered} kept but never answered, {len(crash.lost)} lost"
        )
        print(
            f"  crash-run delivery: {crash.tool_turns} turns with a tool step, "
            f"{crash.repeated} answers repeated (at least once)"
        )
        if args.groups:
            print(
                f"  crash-run groups:   {crash.group_messages} messages in {args.groups} groups, "
                f"{crash.group_repeated} answered twice"
            )
        print(f"  crash-run problems: {len(crash.problems)}")
        for problem in crash.problems[:20]:
            print(f"    {problem}")
    if faults is not None:
        print(f"  faults injected:    {sum(faults.injected.values())}")
        print(
            f"  fault-run messages: {faults.messages} sent, {faults.answered} answered, "
            f"{faults.told} told of an error, {faults.silent} without reply, {len(faults.lost)} lost"
        )
        print(f"  fault-run problems: {len(faults.problems)}")
    print(f"  verdict:            {'BROKEN' if broken else 'ok'}")
    return 1 if broken else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--kills", type=int, default=100, help="SIGKILLs in the crash run (0: skip)"
    )
    parser.add_argument("--chats", type=int, default=20, help="chats writing during the crash run")
    parser.add_argument(
        "--groups",
        type=int,
        default=0,
        help="of those chats, supergroups (answers streamed slowly into an edited message)",
    )
    parser.add_argument(
        "--max-repeats",
        type=int,
        default=1,
        help="answers the crash run may repeat before it counts as broken (at least once)",
    )
    parser.add_argument("--faults", type=int, default=120, help="rounds of the fault run (0: skip)")
    parser.add_argument("--seed", type=int, help="replay a run's random choices")
    parser.add_argument("--workdir", help="where workspaces and logs go (default: a temp dir)")
    args = parser.parse_args()
    # A SIGKILLed memgate drops requests half-sent; the fakes' server would print each one.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="memgate-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    sys.exit(asyncio.run(soak(args, seed, workdir)))


if __name__ == "__main__":
    main()
