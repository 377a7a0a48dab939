"""The gateway lock: one gateway per workspace and per state folder, so two never share files.

Two advisory `flock`s, released by the kernel if the process dies, so a crash never leaves a stale
lock behind: one on the workspace folder itself (no file in the workspace, so no tool can replace
it), one on `STATE/memgate.lock`, which also holds the holder's pid for the message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from gateway.errors import WorkspaceLockedError
from memory.fileio import ensure_private_dir

LOCK_NAME = "memgate.lock"


class WorkspaceLock:
    """Holds both locks from acquire() until release(); acquiring twice raises."""

    def __init__(self, workspace: Path, state_dir: Path) -> None:
        self.workspace = workspace
        self.path = state_dir / LOCK_NAME
        self._fds: list[int] = []

    def acquire(self) -> None:
        if self._fds:
            raise RuntimeError("workspace lock already held by this process")
        ensure_private_dir(self.workspace)
        ensure_private_dir(self.path.parent)
        state_fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        workspace_fd = -1
        try:
            workspace_fd = os.open(self.workspace, os.O_RDONLY | os.O_DIRECTORY)
            for fd, what in ((workspace_fd, self.workspace), (state_fd, self.path.parent)):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(state_fd, 32, 0).decode(errors="replace").strip()
                    raise WorkspaceLockedError(
                        f"another memgate (pid {holder or 'unknown'}) is already running on "
                        f"{what}; stop it first or use another workspace and state_dir"
                    ) from None
        except BaseException:
            for fd in (state_fd, workspace_fd):
                if fd >= 0:
                    os.close(fd)
            raise
        os.ftruncate(state_fd, 0)
        os.pwrite(state_fd, f"{os.getpid()}\n".encode(), 0)
        self._fds = [state_fd, workspace_fd]

    def release(self) -> None:
        if not self._fds:
            return
        state_fd = self._fds[0]
        with contextlib.suppress(OSError):
            os.ftruncate(state_fd, 0)
        for fd in self._fds:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds = []
