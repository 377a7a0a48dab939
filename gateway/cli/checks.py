"""`memgate doctor`'s line (`Check`), the bound every live check runs within, and the checks
that need no SDK: the folders, the disk and the workspace lock.

Apart from gateway/cli/doctor.py (the live checks) so that `memgate doctor` shows the folders'
and the disk's lines before it imports the SDKs of the live checks, which takes a second or more.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path

from gateway.config.models import Config
from gateway.errors import WorkspaceLockedError
from gateway.service.control import request, socket_path
from gateway.service.lock import WorkspaceLock
from gateway.tools.exec import describe, unavailable
from gateway.tools.sandbox import probe

MIN_FREE_BYTES = 200 * 1024 * 1024  # sessions, media and the search index grow from here
LOCK_TIMEOUT = 5.0  # a running service answers on its control socket at once, or is stuck


@dataclass(frozen=True)
class Check:
    """One line of `memgate doctor`: ✓ or ✗, the check's name, and what it found or what to fix.
    A check that only `warns` shows ! when it fails and does not fail doctor: what it found
    costs one optional tool, not the service (web_fetch on a server with no way out)."""

    name: str
    ok: bool
    detail: str
    warns: bool = False

    @property
    def passed(self) -> bool:
        return self.ok or self.warns

    def line(self) -> str:
        mark = "✓" if self.ok else "!" if self.warns else "✗"
        return f"{mark} {self.name}: {self.detail}"


def local_checks(config: Config) -> list[Check]:
    """The folders and the disk: a few file-system calls, done at once."""
    folders = [("workspace", config.workspace), ("state", config.state_dir)]
    checks = [
        *(check_folder(name, folder) for name, folder in folders),
        check_disk(config.workspace),
    ]
    if config.tools.exec.enabled:
        checks.append(check_exec(config))
    return checks


def check_exec(config: Config) -> Check:
    """exec on: whether its sandbox runs here (bwrap installed, user namespaces allowed)."""
    settings = config.tools.exec
    if settings.sandbox == "none":
        return Check("exec", False, "runs commands WITHOUT a sandbox (tools.exec.sandbox: none)")
    reason = unavailable(settings)
    if reason is None and config.workspace.is_dir():
        reason = probe(config.workspace, settings.network)
    if reason is not None:
        return Check("exec", False, f"{reason}; until then the exec tool is not offered")
    return Check("exec", True, describe(settings))


async def bounded(
    name: str,
    limit: float,
    source: str,
    setting: str,
    probe: Awaitable[Check],
    *,
    shown: float | None = None,
) -> Check:
    """`probe`'s check, or a ✗ saying `source` gave no answer within `shown` s (`setting`; by
    default `limit`, which may be what is left of it)."""
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await probe
    except TimeoutError:
        if not deadline.expired():
            raise  # raised inside the probe: not this bound's to explain
        return unanswered(name, source, limit if shown is None else shown, setting)


def unanswered(name: str, source: str, limit: float, setting: str = "") -> Check:
    """The line of a check whose bound ran out: who was silent, how long, and the key for it."""
    key = f" ({setting})" if setting else ""
    return Check(name, False, f"no answer from {source} within {limit:g} s{key}")


def check_folder(name: str, folder: Path) -> Check:
    if not folder.exists():
        return Check(name, True, f"{folder} will be created (mode 0700) at the first start")
    mode = stat.S_IMODE(folder.stat().st_mode)
    if not os.access(folder, os.W_OK | os.X_OK):
        return Check(
            name, False, f"{folder} is not writable by you (fix: sudo chown -R $USER {folder})"
        )
    if mode & 0o077:
        return Check(
            name,
            False,
            f"{folder} has mode {mode:04o}, readable by others (fix: chmod 700 {folder})",
        )
    return Check(name, True, f"{folder} writable, owner-only ({mode:04o})")


async def check_lock(config: Config) -> Check:
    lock = WorkspaceLock(config.workspace, config.state_dir)
    if not config.workspace.exists():
        return Check("lock", True, "free")
    try:
        lock.acquire()
    except WorkspaceLockedError as exc:
        held = exc.args[0].split(";")[0]

        async def asked() -> Check:
            live = await request(socket_path(config.state_dir), {"op": "status"})
            running = "the service answers on its control socket" if live else "no control socket"
            return Check("lock", True, f"{held} ({running})")

        return await bounded("lock", LOCK_TIMEOUT, "the service's control socket", "", asked())
    lock.release()
    return Check("lock", True, "free (no memgate is running on this workspace)")


def check_disk(workspace: Path) -> Check:
    where = workspace
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    shown = f"{free / 1024**3:.1f} GiB free on {where}"
    if free < MIN_FREE_BYTES:
        return Check("disk", False, f"only {shown}: free some space")
    return Check("disk", True, shown)
