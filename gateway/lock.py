"""The workspace lock: one gateway per workspace, so two never append to the same files.

An advisory `flock` on `WORKSPACE/.memgate.lock`, released by the kernel if the process dies, so a
crash never leaves a stale lock behind. The holder's pid is written into the file for the message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gateway.errors import WorkspaceLockedError

LOCK_NAME = ".memgate.lock"


class WorkspaceLock:
    """Holds the lock from acquire() until release(); acquiring twice raises."""

    def __init__(self, workspace: Path) -> None:
        self.path = workspace / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError("workspace lock already held by this process")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WorkspaceLockedError(
                f"another memgate (pid {holder}) is already running on {self.path.parent}; "
                "stop it first or use another workspace"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
