"""Cut the shell commands of docs/service.md's numbered systemd steps into one script per step.

The systemd check runs these scripts inside its container, so what it tests is what the page tells
people to type. The pipx alternative is left out (the check installs with the venv). The one
placeholder, the repository URL, becomes "$MEMGATE_REPOSITORY", which the check sets.

Usage: python3 docs_steps.py docs/service.md OUTPUT_FOLDER   (writes 1.sh ... 5.sh)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SECTION = "## systemd on Debian or Ubuntu"
STEPS = range(1, 6)
PLACEHOLDER = "<memgate repository URL>"


def step_blocks(page: str) -> dict[int, list[str]]:
    """The ```sh blocks under each '### N.' heading of the systemd section, in page order."""
    blocks: dict[int, list[str]] = {}
    step: int | None = None
    in_section = False
    fence: str | None = None  # the language of the block being read
    lines: list[str] = []
    for line in page.splitlines():
        if fence is not None:
            if line.startswith("```"):
                text = "\n".join(lines)
                if fence == "sh" and step is not None and "pipx" not in text:
                    blocks.setdefault(step, []).append(text)
                fence = None
            else:
                lines.append(line)
        elif line.startswith("```"):
            fence, lines = line[3:].strip(), []
        elif line.startswith("## "):
            in_section, step = line.strip() == SECTION, None
        elif in_section and line.startswith("### "):
            number = re.match(r"### (\d+)\. ", line)
            step = int(number.group(1)) if number else None
    return blocks


def main() -> int:
    page, out = Path(sys.argv[1]), Path(sys.argv[2])
    blocks = step_blocks(page.read_text(encoding="utf-8"))
    out.mkdir(parents=True, exist_ok=True)
    for number in STEPS:
        if number not in blocks:
            print(f"{page}: step {number} has no sh block", file=sys.stderr)
            return 1
        text = "\n\n".join(blocks[number]).replace(PLACEHOLDER, '"$MEMGATE_REPOSITORY"')
        (out / f"{number}.sh").write_text(f"# step {number} of {page.name}\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
