"""Helpers for the exec tests: the skip when bwrap is missing, and a workspace the sandbox can use."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NOBODY = 65534

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bwrap (Debian's bubblewrap package) is not installed: exec's sandbox cannot run",
)


def prepare_workspace(tmp_path: Path) -> Path:
    """tmp_path/workspace, usable by the sandbox: run as root, memgate runs commands as the
    workspace's owner (root has no process limit), so it is given to nobody and the folders
    above it are made passable."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        os.chown(workspace, NOBODY, NOBODY)
        for folder in (tmp_path, *tmp_path.parents):
            if folder in (Path("/tmp"), Path("/")):
                break
            folder.chmod(folder.stat().st_mode | 0o011)
    return workspace
