"""The state folder: what the gateway keeps for itself, outside the workspace the model sees.

It holds the Telegram inbox journals and channel state, the search index, the lock, the
terminal's line history, the MCP tool lists remembered from each server's last start, the
token ratio learnt for each model (memory/calibration.py) and the session figures `memgate status`
keeps (memory/sessions/figures.py). Earlier
versions kept these inside the workspace (`.state/`, `.index/`, `.memgate.lock`);
`move_workspace_state()` moves them out once, at start, under the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from pathlib import Path

from gateway.errors import ConfigError, WorkspaceLockedError
from memory.fileio import DIR_MODE, FILE_MODE, ensure_private_dir

log = logging.getLogger(__name__)

INDEX_DIR = "index"
MCP_TOOLS = "mcp-tools.json"
TOKEN_CALIBRATION = "token-calibration.json"
SESSION_FIGURES = "session-figures.json"
OLD_STATE, OLD_INDEX, OLD_LOCK = ".state", ".index", ".memgate.lock"


def mcp_tools_path(state_dir: Path) -> Path:
    """The MCP tool lists remembered from each server's last start."""
    return state_dir / MCP_TOOLS


def token_calibration_path(state_dir: Path) -> Path:
    """The server's tokens per counted token, learnt for each model."""
    return state_dir / TOKEN_CALIBRATION


def session_figures_path(state_dir: Path) -> Path:
    """Each session file's figures as `memgate status` last read them."""
    return state_dir / SESSION_FIGURES


def index_path(state_dir: Path) -> Path:
    """The search index's database file."""
    return state_dir / INDEX_DIR / "memory.db"


def check_apart(workspace: Path, state_dir: Path, source: object) -> None:
    """The workspace and the state folder must not contain each other: the model sees one only."""
    ws, st = workspace.resolve(), state_dir.resolve()
    if ws == st or ws.is_relative_to(st) or st.is_relative_to(ws):
        raise ConfigError(
            f"{source}: state_dir {state_dir} and workspace {workspace} must be separate folders, "
            "neither inside the other (the model may read the workspace, never the state)",
            path=str(source),
            key="state_dir",
        )


def move_workspace_state(workspace: Path, state_dir: Path) -> None:
    """Move `.state/`, `.index/` and `.memgate.lock` out of the workspace; call it under the lock.

    An older memgate still running on the workspace holds `.memgate.lock`: then nothing moves and
    the start is refused. A name already taken in the state folder is never overwritten: the old
    file is kept beside it with a `.from-workspace` suffix.
    """
    moved: list[str] = []
    old_lock = workspace / OLD_LOCK
    if old_lock.is_file() and not old_lock.is_symlink():
        _remove_old_lock(old_lock)
        moved.append(OLD_LOCK)
    old_state = workspace / OLD_STATE
    if old_state.is_dir() and not old_state.is_symlink():
        for entry in sorted(old_state.iterdir()):
            _move(entry, state_dir / entry.name)
        old_state.rmdir()
        moved.append(OLD_STATE)
    old_index = workspace / OLD_INDEX
    if old_index.is_dir() and not old_index.is_symlink():
        if (state_dir / INDEX_DIR).exists():
            # Derived from the files (`memgate memory search` may have built the new one first).
            shutil.rmtree(old_index)
        else:
            _move(old_index, state_dir / INDEX_DIR)
        moved.append(OLD_INDEX)
    if moved:
        log.info(
            "moved gateway state out of the workspace items=%s from=%s to=%s",
            ",".join(moved),
            workspace,
            state_dir,
        )


def _remove_old_lock(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise WorkspaceLockedError(
                f"an older memgate (pid {holder}) is still running on {path.parent}; stop it first"
            ) from None
        path.unlink()
    finally:
        os.close(fd)


def _move(source: Path, target: Path) -> None:
    ensure_private_dir(target.parent)
    wanted, serial = target, 1
    while target.exists() or target.is_symlink():
        suffix = ".from-workspace" if serial == 1 else f".from-workspace-{serial}"
        target = wanted.with_name(wanted.name + suffix)
        serial += 1
    if target != wanted:
        log.warning(
            "state folder already had %s; the workspace's copy is kept as %s", wanted, target
        )
    # shutil.move copies when the state folder is on another filesystem.
    shutil.move(source, target)
    _make_private(target)


def _make_private(path: Path) -> None:
    """The copies keep their old modes (0644 under the old layout); make them owner-only."""
    with contextlib.suppress(OSError):
        os.chmod(path, DIR_MODE if path.is_dir() else FILE_MODE)
    if path.is_dir() and not path.is_symlink():
        for inner in path.rglob("*"):
            if not inner.is_symlink():
                with contextlib.suppress(OSError):
                    os.chmod(inner, DIR_MODE if inner.is_dir() else FILE_MODE)
