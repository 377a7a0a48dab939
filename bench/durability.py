"""`python -m bench.durability`: what fsync costs memgate, as figure a measures it (100 chats).

memgate fsyncs every session append and, by group commit, every inbox arrival. This runs figure
a's 100-chat workload (20 turns each, the bench's instant fake LLM) with fsync as shipped and with
`os.fsync` replaced by a no-op in this process, alternating, and prints turns/s for both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from bench import workloads
from bench.configs import memgate_config
from bench.fakellm import BenchLLM
from gateway.bus import InboundMessage
from gateway.config.file import parse_config
from gateway.service.app import open_runtime

CHATS = 100
TURNS = 20
_REAL_FSYNC = os.fsync


def _no_fsync(fd: object) -> None:
    """Stands in for os.fsync in the "off" runs: the data stays in the page cache."""


async def turns_per_second(llm_url: str, root: Path, fsync: bool) -> float:
    """One run of the 100-chat workload on a fresh workspace."""
    os.fsync = _REAL_FSYNC if fsync else _no_fsync
    try:
        workspace = root / "workspace"
        workspace.mkdir(parents=True)
        raw = {**memgate_config(workspace, llm_url), "state_dir": str(root / "state")}
        async with open_runtime(parse_config(raw, root / "config.yaml", env={})) as runtime:

            async def ask(chat_id: str, text: str) -> str:
                reply = await runtime.agent.handle(InboundMessage("bench", chat_id, "user", text))
                return reply.text if reply is not None else ""

            await workloads.warm_up(ask)
            result = await workloads.concurrent_chats(ask, CHATS, TURNS)
        return len(result["latencies_ms"]) / result["wall_s"]
    finally:
        os.fsync = _REAL_FSYNC


async def measure(runs: int) -> dict[str, list[float]]:
    llm = BenchLLM()
    url = llm.start()
    figures: dict[str, list[float]] = {"on": [], "off": []}
    try:
        with tempfile.TemporaryDirectory(prefix="memgate-durability-") as tmp:
            for run in range(runs):
                for mode in ("on", "off"):
                    root = Path(tmp) / f"{mode}-{run}"
                    figures[mode].append(await turns_per_second(url, root, mode == "on"))
    finally:
        llm.stop()
    return figures


def summary(figures: dict[str, list[float]]) -> list[str]:
    """The figures as a small Markdown table and one sentence, for the console and the report."""
    on, off = statistics.median(figures["on"]), statistics.median(figures["off"])
    lines = [f"| turns/s, {CHATS} concurrent chats | min / median / max |", "|---|---|"]
    for mode, label in (("on", "fsync on (as shipped)"), ("off", "fsync off")):
        values = sorted(figures[mode])
        lines.append(
            f"| {label} | {values[0]:.0f} / **{statistics.median(values):.0f}** / {values[-1]:.0f} |"
        )
    lines += ["", f"fsync costs {100 * (1 - on / off):.1f}% of turns/s at {CHATS} chats."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("\n".join(summary(asyncio.run(measure(args.runs)))))


if __name__ == "__main__":
    main()
