"""Figure g: time to first visible text, a 400-token reply the fake writes at 50 tokens a second.

`memgate chat -m` (streaming on, and with `--no-stream`) against `nanobot agent -m --no-markdown`
(which streams), each on a pseudo-terminal as a person would run it: nanobot's renderer draws its
stream only on a terminal. The clock starts when the fake receives the chat request, so process
start-up (figure d) stays out of it; it stops when the reply's first word appears in the output.
`python -m bench.first_text` runs this figure alone and prints its rows.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import yaml

from bench.configs import memgate_config, nanobot_config
from bench.runner import Bench, System, both_systems
from bench.stats import Row

TOKENS = 400
RATE = 50.0  # tokens a second
MARKER = "Qzx"  # the reply's first word, in its first streamed chunk (4 characters)
END = "Zqv"  # its last word
ANSWER = " ".join([MARKER, *(f"w{n % 100:02d}" for n in range(TOKENS - 2)), END])  # 4 chars a token
MESSAGE = "tell me a long story"


def _command(system: System, root: Path, llm: str, stream: bool) -> list[str]:
    workspace = root / "workspace"
    if system.name == "memgate":
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump(memgate_config(workspace, llm)), encoding="utf-8")
        command = [str(system.cli), "chat", "-m", MESSAGE, "--config", str(config)]
        return command if stream else [*command, "--no-stream"]
    config = root / "config.json"
    config.write_text(json.dumps(nanobot_config(workspace, llm)), encoding="utf-8")
    return [str(system.cli), "agent", "-m", MESSAGE, "--config", str(config), "--no-markdown"]


def _watch(command: list[str], bench: Bench) -> tuple[float, float]:
    """Run `command` on a pseudo-terminal; monotonic times of the reply's first word and of the
    whole reply on the screen."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        command,
        env={**bench.env, "COLUMNS": "200", "LINES": "50", "TERM": "xterm"},
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    screen = b""
    first = whole = 0.0
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                raise RuntimeError(f"{command[0]} printed nothing for 60 s")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            screen += chunk
            if not first and MARKER.encode() in screen:
                first = time.monotonic()
            if first and not whole and END.encode() in screen:
                whole = time.monotonic()
    finally:
        os.close(leader)
        code = process.wait(timeout=60)
    if code != 0 or not first:
        error = process.stderr.read().decode() if process.stderr else ""
        raise RuntimeError(f"{command[0]} exited {code} without the reply:\n{error[-2000:]}")
    return first, whole or first


def _asked_at(bench: Bench) -> float:
    """When the fake received the run's chat request (monotonic, the orchestrator's clock)."""
    chats = [r for r in bench.llm.requests() if r.get("messages")]
    return float(chats[-1]["_arrived_at"])


def first_text(bench: Bench, systems: list[System], runs: int) -> list[Row]:
    """g. Per run and system: ms from the request to the first word and to the whole reply."""
    nanobot = next(s for s in systems if s.name == "nanobot")
    memgate = next(s for s in systems if s.name == "memgate")
    variants = {"on": (memgate, True), "off": (memgate, False), "nanobot": (nanobot, True)}
    commands = {
        name: _command(system, bench.workdir(f"first-text-{name}"), bench.llm.url, stream)
        for name, (system, stream) in variants.items()
    }
    for name in ("on", "off"):  # the workspace files `memgate init` writes, as figure d does
        config = commands[name][commands[name].index("--config") + 1]
        subprocess.run(
            [str(memgate.cli), "init", "--config", config],
            env=bench.env,
            check=True,
            capture_output=True,
        )
    bench.llm.write_slowly(ANSWER, RATE)
    first: dict[str, list[float]] = {name: [] for name in variants}
    whole: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for number in range(runs):
            for name in variants:
                print(f"  first text {name} run {number + 1}/{runs}", flush=True)
                bench.llm.reset(keep_requests=True)
                shown, done = _watch(commands[name], bench)
                asked = _asked_at(bench)
                first[name].append((shown - asked) * 1000)
                whole[name].append((done - asked) * 1000)
    finally:
        bench.llm.write_slowly(None)
        bench.llm.reset()
    what = f"{TOKENS}-token reply at {RATE:.0f} tok/s: request to"
    return [
        Row(
            "g.first.on",
            "g",
            f"{what} first visible text, streaming on",
            "ms",
            first["on"],
            first["nanobot"],
            0,
        ),
        Row(
            "g.first.off",
            "g",
            f"{what} first visible text, memgate streaming off",
            "ms",
            first["off"],
            first["nanobot"],
            0,
        ),
        Row(
            "g.whole.on",
            "g",
            f"{what} whole reply visible, streaming on",
            "ms",
            whole["on"],
            whole["nanobot"],
            0,
        ),
    ]


def main() -> None:
    """This figure alone: `python -m bench.first_text [RUNS]`."""
    import sys

    from bench.fakellm import BenchLLM
    from bench.venvs import memgate_python, nanobot_python

    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    systems = both_systems(nanobot_python(), memgate_python())
    llm = BenchLLM()
    llm.start()
    bench = Bench(llm)
    try:
        rows = first_text(bench, systems, runs)
    finally:
        bench.close()
        llm.stop()
    for row in rows:
        print(f"{row.key}: memgate {row.cell('memgate')} ms, nanobot {row.cell('nanobot')} ms")


if __name__ == "__main__":
    main()
