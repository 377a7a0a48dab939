"""A shell command run in bubblewrap: the kernel's namespaces are the boundary, not a filter.

The command sees the system read-only (`/usr` and the few files of `/etc` programs need, never
`/etc/shadow`), the workspace read-write at its own path, a private `/tmp`, and nothing else: not
the state folder, the config file, the home folder or memgate's environment. It runs in new user,
pid, ipc, uts and (unless allowed) network namespaces, under limits on CPU time, memory and
processes set inside the sandbox (so the process count is the sandbox's own, not the user's), and
the whole tree is killed at the timeout or when its output outgrows the cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BWRAP = "bwrap"
PRLIMIT = "/usr/bin/prlimit"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
PROBE_TIMEOUT = 5.0  # seconds `memgate doctor` gives the sandbox to run `true`
PIPE_GRACE = 5.0  # seconds the output may stay open once the command ended
HOME_INSIDE = "/tmp/home"  # on the private /tmp: nothing of the real home is there
# What of /etc a program needs to start, name users and find its libraries, locale and zone;
# everything else there (shadow, ssh host keys, sudoers, TLS private keys) stays out.
ETC_KEPT = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "debian_version",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "localtime",
    "locale.alias",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
    "timezone",
)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")


class SandboxError(Exception):
    """The sandbox cannot run a command here (bwrap missing, a root-owned workspace)."""


@dataclass(frozen=True)
class Limits:
    """What one command may use: CPU seconds, address space, processes, captured output."""

    cpu_seconds: int = 60
    memory_mb: int = 1024
    processes: int = 64
    output_chars: int = 16_000


@dataclass(frozen=True)
class Outcome:
    """What a command did: its status (None when memgate ended it) and its capped output."""

    status: int | None
    stdout: str
    stderr: str
    note: str = ""  # why memgate ended it (timeout, too much output), else empty


def bwrap_path() -> str | None:
    """Where `bwrap` is, or None (then exec is not offered)."""
    return shutil.which(BWRAP)


@dataclass(frozen=True)
class Sandbox:
    """Runs commands with the workspace as the one writable place; `isolated` False runs them
    without bwrap (an explicit opt-out: same limits and cleared environment, no namespaces)."""

    workspace: Path
    hidden: tuple[Path, ...] = ()  # inside the workspace but never shown (config, state)
    read_only: tuple[Path, ...] = ()  # inside the workspace, shown read-only (sessions/)
    network: bool = False
    limits: Limits = Limits()
    isolated: bool = True

    def argv(self, command: str) -> list[str]:
        """The full command line: bwrap (when isolated), then prlimit, then `sh -c`."""
        inner = [
            PRLIMIT,
            f"--cpu={self.limits.cpu_seconds}",
            f"--as={self.limits.memory_mb * 1024 * 1024}",
            f"--nproc={self.limits.processes}",
            "--core=0",
            "--",
            "/bin/sh",
            "-c",
            command,
        ]
        if not self.isolated:
            return inner
        bwrap = bwrap_path()
        if bwrap is None:
            raise SandboxError("bwrap is not installed (Debian/Ubuntu: apt install bubblewrap)")
        return [bwrap, *self._mounts(), "--", *inner]

    def _mounts(self) -> list[str]:
        args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if not self.network:
            args.append("--unshare-net")
        # No --hostname: sethostname is refused under the systemd unit (ProtectHostname=).
        args += ["--die-with-parent", "--new-session"]
        for folder in SYSTEM_DIRS:
            path = Path(folder)
            if path.is_symlink():  # merged /usr: /bin -> usr/bin
                args += ["--symlink", os.readlink(path), folder]
            elif path.is_dir():
                args += ["--ro-bind", folder, folder]
        for name in ETC_KEPT:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for python in sorted(Path("/etc").glob("python3*")):  # Debian's site configuration
            args += ["--ro-bind-try", str(python), str(python)]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", HOME_INSIDE]
        workspace = str(self.workspace)
        args += ["--bind", workspace, workspace]
        for path in self.read_only:
            if _reachable(path, self.workspace):
                args += ["--ro-bind", str(path), str(path)]
        for path in self.hidden:
            if path.is_dir():
                args += ["--tmpfs", str(path)]
            elif path.exists():
                args += ["--ro-bind", "/dev/null", str(path)]
        args += ["--chdir", workspace, "--clearenv"]
        for name, value in self.environment().items():
            args += ["--setenv", name, value]
        return args

    def environment(self) -> dict[str, str]:
        """The whole environment a command gets: nothing of memgate's own (its keys)."""
        return {
            "PATH": SAFE_PATH,
            "HOME": HOME_INSIDE if self.isolated else str(self.workspace),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }

    async def run(self, command: str, seconds: float) -> Outcome:
        """Run `command`; after `seconds`, or once its output passes the cap, its whole
        process tree is killed and the note says why."""
        argv = self.argv(command)
        user = _unprivileged(self.workspace)
        spawn = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.workspace,
                env=self.environment(),
                start_new_session=True,  # one process group to kill, apart from memgate's
                **user,
            )
        )
        try:
            # Shielded: cancelled while its pipes connect, asyncio kills the child and then waits
            # for the exit to be reported, which under load was seen never to come (a /stop hung
            # its turn). Here the start is let finish and the whole group killed at once.
            process = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            started = await spawn
            _kill_tree(started.pid)
            raise
        assert process.stdout is not None and process.stderr is not None
        cap = self.limits.output_chars
        over = asyncio.Event()
        out = asyncio.create_task(_read_capped(process.stdout, cap, over))
        err = asyncio.create_task(_read_capped(process.stderr, cap, over))
        ended = asyncio.create_task(process.wait())
        watch = asyncio.create_task(over.wait())
        note = ""
        try:
            done, _ = await asyncio.wait(
                {ended, watch}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
            if ended not in done:
                note = (
                    f"stopped: output passed {cap} characters"
                    if watch in done
                    else f"stopped: still running after {seconds:g} s"
                )
                _kill_tree(process.pid)
            await ended
        finally:
            watch.cancel()
            if not ended.done():  # cancelled (the turn was stopped): nothing may outlive it
                _kill_tree(process.pid)
                ended.cancel()
        # The pipes close once every process holding them is gone (the pid namespace's are);
        # without the sandbox a process that left the group may hold them: read no longer.
        try:
            async with asyncio.timeout(PIPE_GRACE):
                stdout, stderr = await asyncio.gather(out, err)
        except TimeoutError:
            stdout, stderr = "", ""
            note = note or "ended, but a process it left behind kept its output open"
        status = None if note else process.returncode
        return Outcome(status, stdout, stderr, note)


def probe(workspace: Path, network: bool = False) -> str | None:
    """Run `true` in the sandbox once, as exec would: None if it ran, else why not (no bwrap,
    user namespaces refused, e.g. by a service manager's hardening)."""
    sandbox = Sandbox(workspace, network=network)
    try:
        argv = sandbox.argv("true")
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            cwd=workspace,
            env=sandbox.environment(),
            **_unprivileged(workspace),
        )
    except SandboxError as exc:
        return str(exc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be run ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        return f"bwrap failed: {done.stderr.strip()[:200] or f'exit status {done.returncode}'}"
    return None


async def _read_capped(stream: asyncio.StreamReader, cap: int, over: asyncio.Event) -> str:
    """Up to `cap` characters of a stream; past that it is drained and `over` is set."""
    kept = bytearray()
    cut = False
    while chunk := await stream.read(65536):
        if len(kept) < cap * 4:  # bytes: a character is at most four
            kept += chunk
        if len(kept) > cap:
            cut = True
            over.set()
    text = kept.decode("utf-8", errors="replace")
    if cut or len(text) > cap:
        text = text[:cap] + f"\n[... output cut at {cap} characters]"
    return text


def _kill_tree(pid: int) -> None:
    # bwrap leads its own process group (start_new_session); its child is pid 1 of the command's
    # pid namespace and dies with it (--die-with-parent), which ends every process inside.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _unprivileged(workspace: Path) -> dict[str, Any]:
    """For a memgate running as root: run the command as the workspace's owner, since the kernel
    enforces no process limit on root. A root-owned workspace is refused."""
    if os.geteuid() != 0:
        return {}
    stat = workspace.stat()
    if stat.st_uid == 0:
        raise SandboxError(
            "memgate runs as root and the workspace is owned by root: exec runs commands only "
            "as an unprivileged user (run memgate as one, or chown the workspace to one)"
        )
    return {"user": stat.st_uid, "group": stat.st_gid, "extra_groups": []}


def _reachable(path: Path, workspace: Path) -> bool:
    """Whether the command's user can reach `path` (bwrap binds it as that user): for a memgate
    run as root, the folders it made in the workspace (0700, root's) are not the owner's."""
    if not path.exists():
        return False
    if os.geteuid() != 0:
        return True
    uid = workspace.stat().st_uid
    probe = path
    while probe != workspace and workspace in probe.parents:
        mode = probe.stat()
        if not mode.st_mode & (0o100 if mode.st_uid == uid else 0o001):
            return False
        probe = probe.parent
    return True
