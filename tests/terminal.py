"""memgate on a pseudo-terminal that is its controlling terminal, as a person at a keyboard runs it."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import subprocess
import sys
import termios


class Terminal:
    """memgate on a pseudo-terminal that is its controlling terminal, so ^C sends SIGINT."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()

        def controlling_tty() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=controlling_tty,
        )
        os.close(slave)
        self.master = master
        self.output = ""

    async def wait_for(self, needle: str, count: int = 1) -> None:
        """Read until `needle` appeared `count` times in the output."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(30):
            while self.output.count(needle) < count:
                chunk = await loop.run_in_executor(None, self._read)
                if not chunk:
                    raise AssertionError(f"terminal closed; output so far:\n{self.output}")
                self.output += chunk

    def _read(self) -> str:
        try:
            return os.read(self.master, 65536).decode(errors="replace")
        except OSError:
            return ""

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    async def exit_code(self) -> int:
        async with asyncio.timeout(30):
            while self.process.poll() is None:
                chunk = await asyncio.get_running_loop().run_in_executor(None, self._read)
                self.output += chunk
                if not chunk:
                    break
        return await asyncio.to_thread(self.process.wait, 30)

    def close(self) -> None:
        os.close(self.master)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
