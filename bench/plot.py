"""The plot of figures b and f, docs/benchmarks.png; run by bench/.venv-tools (matplotlib).

Usage: `python -m bench.plot DATA.json OUT.png`, DATA as written by `bench.__main__`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"memgate": "#1f77b4", "nanobot": "#d62728"}


def plot(data: dict, out: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    history = data["history"]
    styles = {"cold": "o-", "warm": "s--"}
    for label, values in history["series"].items():
        name, kind, variant = label.split(", ")
        shade = 1.0 if variant == "consolidated" else 0.45
        left.plot(
            history["sizes"], values, styles[kind], color=COLORS[name], alpha=shade, label=label
        )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("messages already stored in the chat's session file")
    left.set_ylabel("turn latency, median (ms)")
    left.set_title("b. Cost of one turn vs. stored history")
    left.grid(True, which="both", alpha=0.3)
    left.legend()

    prompts = data["prompts"]
    for name in ("memgate", "nanobot"):
        tokens = prompts[name]
        right.plot(range(1, len(tokens) + 1), tokens, color=COLORS[name], label=name, lw=1.2)
    right.axhline(prompts["budget"], color="black", ls="--", lw=1, label="budget")
    right.set_xlabel("turn")
    right.set_ylabel("prompt tokens (o200k_base, counted at the fake)")
    right.set_title("f. Prompt tokens per turn, 300-turn chat")
    right.grid(True, alpha=0.3)
    right.legend()

    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    plot(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
