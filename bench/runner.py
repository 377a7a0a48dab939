"""Runs one figure of one system in a fresh subprocess of that system's interpreter.

Every run gets an empty work directory under the bench's scratch directory, the seeded tiktoken
cache, and a private HOME, so neither system reads or writes anything of the user's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.fakellm import BenchLLM
from bench.protocol import RESULT_PREFIX
from bench.venvs import REPO, seed_tiktoken


@dataclass(frozen=True)
class System:
    """One side of the comparison: its interpreter, its driver, its command line."""

    name: str
    python: Path
    driver: str  # module run with `python -m`
    cli: Path  # the console script of figure d


class DriverError(RuntimeError):
    """A driver exited non-zero or printed no result."""


class Bench:
    """The scratch directory, the environment and the fake LLM shared by every run."""

    def __init__(self, llm: BenchLLM) -> None:
        self.llm = llm
        self.scratch = Path(tempfile.mkdtemp(prefix="memgate-bench-"))
        tiktoken_dir = self.scratch / "tiktoken"
        seed_tiktoken(tiktoken_dir)
        home = self.scratch / "home"
        home.mkdir()
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("NANOBOT_", "MEMGATE_", "VIRTUAL_ENV", "PYTHON"))
        }
        self.env.update(
            TIKTOKEN_CACHE_DIR=str(tiktoken_dir),
            HOME=str(home),
            MEMGATE_HOME=str(home / ".memgate"),
            COLUMNS="200",
            TERM="dumb",
        )

    def workdir(self, label: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{label}-", dir=self.scratch))

    def drive(
        self, system: System, figure: str, params: dict[str, Any], timeout: float = 900
    ) -> Any:
        """Run `figure` in a fresh process of `system` and return what its driver printed."""
        workdir = self.workdir(f"{system.name}-{figure}")
        command = [str(system.python), "-m", system.driver, figure]
        command += ["--llm", self.llm.url, "--workdir", str(workdir)]
        command += ["--params", json.dumps(params)]
        try:
            done = subprocess.run(
                command, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
        if done.returncode != 0 or not lines:
            tail = "\n".join(done.stderr.splitlines()[-30:])
            raise DriverError(f"{system.name} {figure} exited {done.returncode}:\n{tail}")
        return json.loads(lines[-1].removeprefix(RESULT_PREFIX))

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def both_systems(nanobot_py: Path, memgate_py: Path) -> list[System]:
    """memgate and nanobot, each from its own bench venv, as every figure runs them."""
    from bench.venvs import NANOBOT_VENV

    return [
        System("memgate", memgate_py, "bench.memgate_driver", memgate_py.parent / "memgate"),
        System("nanobot", nanobot_py, "bench.nanobot_driver", NANOBOT_VENV / "bin" / "nanobot"),
    ]
