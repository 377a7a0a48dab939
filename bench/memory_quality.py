"""Figure j (`python -m bench.memory_quality`): does memory feed on itself over a long chat?

memgate alone, in this process, against the test fake LLM scripted as a naive model: a 300-turn
conversation in the owner's DM where the person states a new fact most turns and now and then
repeats an old one in other case and spacing, and where every fifth turn the model recalls memory
(`memory_search`) before answering. Consolidation's model files every fact it reads, and
paraphrases every recalled snippet it is shown as "The user once said: ..." (as models do), so a
recall that reached it comes back as a new line. Figures: MEMORY.md lines that are recalls filed
again (0 expected: recalls reach consolidation as markers), duplicate lines dropped, the MEMORY.md
it ends with once every turn is consolidated, and the run's time.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.configs import memgate_config
from bench.stats import Row
from gateway.bus import InboundMessage
from gateway.config.file import parse_config
from gateway.service.app import open_runtime
from memory.consolidation.consolidator import Job
from tests.fakes.llm import (
    Reply,
    compaction_reply,
    is_compaction,
    is_consolidation,
    last_user_text,
    start_fake_llm,
    text,
    tool_call,
)

TURNS = 300
RECALL_EVERY = 5
REPEAT_EVERY = 7  # a turn that repeats an earlier fact, in capitals and with doubled spaces
WINDOW = 20  # messages: a consolidation about every ten turns
RECALLED = "- The user once said: "
KEY = "bench:1"
_TURN = re.compile(r"turn (\d+):")
_LINE = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] (?P<role>[A-Z]+): (?P<text>.*)$")


def said(turn: int) -> str:
    """What the person writes at `turn`."""
    if turn % REPEAT_EVERY == 0 and turn >= REPEAT_EVERY:
        earlier = turn - REPEAT_EVERY + 1
        return f"turn {turn}: " + fact(earlier).upper().replace(" ", "  ")
    return f"turn {turn}: {fact(turn)}"


def fact(turn: int) -> str:
    return (
        f"fact {turn}: friend number {turn} likes the colour {('red', 'blue', 'green')[turn % 3]}"
    )


def chat_reply(body: dict[str, Any]) -> Reply:
    """The chat model: a memory_search on every fifth turn, then (or else) a short answer."""
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return text("Here is what I remember.")
    match = _TURN.search(last_user_text(body))
    if match and int(match.group(1)) % RECALL_EVERY == 0:
        return tool_call("memory_search", {"query": "friend likes colour"})
    return text("Noted.")


def consolidation_reply(body: dict[str, Any]) -> Reply:
    """The naive consolidation model: MEMORY.md as shown, plus a line for every fact said and
    for every recalled snippet it can read."""
    prompt = last_user_text(body)
    memory = prompt.partition("## Current MEMORY.md\n\n")[2].partition("\n\n## Conversation")[0]
    chunk = prompt.partition("## Conversation to consolidate\n\n")[2].partition("\n\n## ")[0]
    new = []
    for line in chunk.splitlines():
        parsed = _LINE.match(line)
        if parsed is None:
            continue
        role, words = parsed["role"], parsed["text"]
        if role == "USER" and "fact" in words.casefold():
            new.append("- " + words.split(": ", 1)[1])
        elif role == "TOOL" and not words.startswith("[recalled from memory"):
            new += [RECALLED + hit.split("  ")[-1][:80] for hit in words.split(" memory/")[:3]]
    update = memory.rstrip("\n") + "\n" + "".join(f"{line}\n" for line in new)
    stamp = chunk[:18] if chunk.startswith("[") else "[2026-01-01 00:00]"
    entry = f"{stamp} Talked about {len(new)} things."
    return tool_call("save_memory", {"history_entry": entry, "memory_update": update})


def reply(body: dict[str, Any]) -> Reply:
    if is_consolidation(body):
        return consolidation_reply(body)
    if is_compaction(body):
        return compaction_reply(body)
    return chat_reply(body)


async def run(root: Path) -> dict[str, float]:
    """One scripted conversation on a fresh workspace under `root`; its figures."""
    fake, runner = await start_fake_llm()
    fake.default = reply
    started = time.monotonic()
    try:
        workspace = root / "workspace"
        raw = memgate_config(workspace, fake.url, memory={"window": WINDOW})
        async with open_runtime(parse_config(raw, root / "config.yaml", env={})) as runtime:
            for turn in range(1, TURNS + 1):
                message = InboundMessage("bench", "1", "owner", said(turn), sender_is_owner=True)
                await runtime.agent.handle(message)
                fake.requests.clear()  # counts only; the bodies would add up
            # The rest consolidated too, as `memgate memory consolidate` does: every turn counts.
            await runtime.consolidator.wait_idle()
            runtime.consolidator.enqueue(Job(KEY, KEY, everything=True))
            await runtime.consolidator.wait_idle()
            memory = runtime.memory.read_memory()
            counts = runtime.consolidator.curator.counts
            refilled = sum(1 for line in memory.splitlines() if line.startswith(RECALLED))
            return {
                "refiled": refilled,
                "duplicates": counts.duplicates_dropped,
                "lines": sum(1 for line in memory.splitlines() if line.startswith("- ")),
                "seconds": time.monotonic() - started,
            }
    finally:
        await runner.cleanup()


def measure() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="memgate-memory-quality-") as tmp:
        return asyncio.run(run(Path(tmp)))


def memory_quality() -> list[Row]:
    """Figure j's rows (one run: the figures are counts of a scripted conversation)."""
    figures = measure()
    return [
        Row("j.refiled", "j", "MEMORY.md lines that are recalls filed again", "lines",
            [figures["refiled"]], [], 0),
        Row("j.duplicates", "j", "repeated lines dropped from updates", "lines",
            [figures["duplicates"]], [], 0),
        Row("j.lines", "j", "MEMORY.md fact lines at the end", "lines", [figures["lines"]], [], 0),
        Row("j.seconds", "j", "the 300 turns and their consolidation", "s",
            [figures["seconds"]], [], 1),
    ]  # fmt: skip


def main() -> None:
    figures = measure()
    print(
        f"{TURNS} turns, a recall every {RECALL_EVERY}: {figures['refiled']:.0f} recalls filed "
        f"again, {figures['duplicates']:.0f} repeated lines dropped, {figures['lines']:.0f} fact "
        f"lines in MEMORY.md, {figures['seconds']:.1f} s"
    )


if __name__ == "__main__":
    main()
