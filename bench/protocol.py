"""What the orchestrator and both drivers share: stdlib only, importable from either venv.

A driver is a script run by one system's own interpreter; it receives its parameters as JSON on
the command line and prints one `RESULT {json}` line. It talks to the fake LLM (which lives in the
orchestrator process) over loopback, including a few `/bench/*` control routes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULT_PREFIX = "RESULT "
API_KEY = "sk-bench-not-a-secret-0123456789"
MODEL = "gpt-4o-mini"

_WORDS = [
    "apple",
    "river",
    "window",
    "garden",
    "planet",
    "silver",
    "coffee",
    "morning",
    "travel",
    "notebook",
    "question",
    "answer",
    "meeting",
    "project",
    "budget",
    "weekend",
    "holiday",
    "station",
    "museum",
    "ticket",
    "recipe",
    "kitchen",
    "doctor",
    "language",
    "music",
    "concert",
    "ocean",
    "mountain",
    "bicycle",
    "camera",
]


def message_text(index: int, words: int = 60) -> str:
    """A deterministic user message of about `words` words (~1.3 tokens each)."""
    rng = random.Random(index)
    body = " ".join(rng.choice(_WORDS) for _ in range(words))
    return f"Message {index}: {body}."


def rss_mb() -> float:
    """Resident set size of this process now, in MB (VmRSS)."""
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (VmHWM).

    Not `ru_maxrss`: Linux carries that across fork and exec, so a driver started by a large
    orchestrator reports the orchestrator's size. VmHWM belongs to this process's own memory.
    """
    return _status_mb("VmHWM")


def _status_mb(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


def now_ms() -> float:
    return time.perf_counter() * 1000


class FakeControl:
    """Reads and steers the fake LLM through its `/bench/*` routes (blocking; call off-loop)."""

    def __init__(self, llm_url: str) -> None:
        self.root = llm_url.removesuffix("/v1")

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = json.dumps(payload or {}).encode() if method == "POST" else None
        request = urllib.request.Request(f"{self.root}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, int]:
        """Counts of requests so far: total, chat, consolidation, and in flight."""
        return self._call("GET", "/bench/stats")

    def hold_next_consolidation(self, seconds: float) -> None:
        """The next consolidation call is answered only after `seconds`."""
        self._call("POST", "/bench/hold", {"seconds": seconds})


@dataclass(frozen=True)
class Run:
    """What a driver's figure function is given."""

    llm: str  # the fake LLM's base URL, ending in /v1
    workdir: Path  # an empty directory this run owns
    params: dict[str, Any]


Figure = Callable[[Run], Coroutine[Any, Any, Any]]


def run_driver(figures: dict[str, Figure]) -> None:
    """Parse `FIGURE --llm URL --workdir DIR --params JSON`, run it, print the RESULT line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("figure", choices=sorted(figures))
    parser.add_argument("--llm", required=True, help="the fake LLM's base URL (ends in /v1)")
    parser.add_argument("--workdir", required=True, help="an empty directory this run may use")
    parser.add_argument("--params", default="{}", help="JSON parameters of the figure")
    args = parser.parse_args()
    run = Run(args.llm, Path(args.workdir), json.loads(args.params))
    result = asyncio.run(figures[args.figure](run))
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
