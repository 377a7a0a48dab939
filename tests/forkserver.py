"""`memgate` commands for tests from a warm interpreter: each run is a fork, not a new Python.

Some hundred tests run the real CLI as a child process and read its exit status, stdout and
stderr. Most of such a child's time is the same imports (pydantic, the openai SDK, the gateway),
paid again by every test. This server imports them once per test worker and forks a child per
command: the child gets the test's argv, environment, working folder and pipes, runs `python -m
gateway` as the interpreter would (`runpy`, `__main__`, SystemExit's code, threads joined and
exit functions run), and its status goes back to the test when it ends. Only imports are done
ahead: nothing of the gateway has run in the server, so a child starts from the state a fresh
process has once its imports are done. Tests that need a process of their own (signals, a
terminal, `memgate run`) start one as before.

`MEMGATE_TEST_FORK=0` runs every command as a plain subprocess instead.

Wire: one SOCK_SEQPACKET connection per command. The test sends one JSON message (argv, env, cwd)
with three file descriptors (stdin, stdout, stderr); the server answers with the exit status as
text when the child has ended, and kills the child if the test closes the connection first.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

# What a `memgate` command spends its start-up on; importing has no effect beyond the import.
WARM_MODULES = (
    "gateway.cli.main",
    "gateway.cli.stores",
    "gateway.cli.doctor",
    "gateway.service.app",
    "gateway.service.run",
    "gateway.llm.provider",
    "channels.telegram.channel",
    "channels.discord.channel",
)


def serve(path: str) -> None:
    """Accept commands on the socket at `path` until the process that started us is gone."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    # A fork copies only the thread that forks: an import that left a thread running would
    # leave every child with a lock no one can release.
    assert threading.active_count() == 1, "an import started a thread"
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)  # the one line the starter waits for
    children: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        watched = [listener, *children.values()]
        readable, _, _ = select.select(watched, [], [], 0.02)
        for ready in readable:
            if ready is listener:
                connection, _ = listener.accept()
                pid = _start(connection, listener, children)
                if pid:
                    children[pid] = connection
                    connection.send(f"pid:{pid}".encode())
            else:  # the test went away (a timeout, a failure): its command goes too
                for pid, connection in list(children.items()):
                    if connection is ready and not connection.recv(16):
                        os.kill(pid, signal.SIGKILL)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                connection = children.pop(pid)
                try:
                    connection.send(f"exit:{os.waitstatus_to_exitcode(status)}".encode())
                except OSError:
                    pass  # the test is gone already
                connection.close()


def _start(
    connection: socket.socket, listener: socket.socket, children: dict[int, socket.socket]
) -> int:
    """Fork a child for the command on `connection`; in the child this never returns."""
    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    listener.close()
    for other in children.values():
        other.close()
    connection.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os._exit(_run_gateway(request["argv"]))


def _run_gateway(argv: list[str]) -> int:
    """`python -m gateway *argv` in this process, ended as the interpreter would end it."""
    sys.argv = ["-m", *argv]  # run_module puts the module's path first, as `-m` does
    code: Any = 0
    try:
        runpy.run_module("gateway", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # as the interpreter reports an uncaught error: traceback, status 1
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at exit
    atexit._run_exitfuncs()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # closed by the command, or its reader gone
    return int(code) & 0xFF


class _Server:
    """This worker's fork server, started at first use and stopped with the worker."""

    process: subprocess.Popen[str] | None = None
    path = ""


def _server_path() -> str:
    if _Server.process is None or _Server.process.poll() is not None:
        folder = tempfile.mkdtemp(prefix="memgate-fork-")
        _Server.path = str(Path(folder) / "fork.sock")
        _Server.process = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver", _Server.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert _Server.process.stdout is not None
        if _Server.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the test fork server did not start")
        atexit.register(_Server.process.kill)
    return _Server.path


def _read_all(fd: int) -> bytes:
    chunks = []
    with os.fdopen(fd, "rb") as stream:
        while chunk := stream.read(65536):
            chunks.append(chunk)
    return b"".join(chunks)


class ForkedProcess:
    """A forked command as a test sees a child process: its pid, signals sent to it, and its
    exit status (set as soon as it ends, as asyncio's child watcher sets a subprocess's)."""

    def __init__(self, connection: socket.socket, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._connection = connection
        self._ended = asyncio.ensure_future(self._exit_status())

    async def _exit_status(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            message = await loop.sock_recv(self._connection, 64)
        finally:
            self._connection.close()  # before the end (a cancelled test): the server kills it
        self.returncode = int(message.decode().removeprefix("exit:"))
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, number)

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def discard(self) -> None:
        """Stop waiting (the test is over): the server kills the command if it still runs."""
        self._ended.cancel()


async def start_forked(
    args: list[str], env: dict[str, str], stdin: int, stdout: int, stderr: int
) -> ForkedProcess:
    """`memgate *args` with `env`, its standard streams on the given descriptors (the caller
    keeps and closes its own copies)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(_server_path())
    request = {"argv": args, "env": env, "cwd": os.getcwd()}
    socket.send_fds(connection, [json.dumps(request).encode()], [stdin, stdout, stderr])
    connection.setblocking(False)
    message = await asyncio.get_running_loop().sock_recv(connection, 64)
    return ForkedProcess(connection, int(message.decode().removeprefix("pid:")))


async def run_forked(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """`memgate *args` with `env` and stdin from /dev/null: (exit status, stdout, stderr).

    Bounded by the caller: a cancelled run closes its connection, and the server kills it."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    try:
        process = await start_forked(args, env, stdin, out_write, err_write)
    finally:
        for fd in (stdin, out_write, err_write):
            os.close(fd)
    try:
        out, err, status = await asyncio.gather(
            asyncio.to_thread(_read_all, out_read),
            asyncio.to_thread(_read_all, err_read),
            process.wait(),
        )
    finally:
        process.discard()
    return status, out.decode(), err.decode()


if __name__ == "__main__":
    serve(sys.argv[1])
