"""The fake Bot API (tests/fakes/telegram_api.py) as a process of its own, for the figures that
time a real `memgate run` against it (h and i); driven through the fake's /ctl/ routes."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from bench.venvs import REPO


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class FakeTelegramProcess:
    """Started by the constructor, listening once it returns; `close()` ends it."""

    def __init__(self, python: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [str(python), "-m", "tests.fakes.telegram_api", "--port", str(self.port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        self.process.stdout.readline()  # its "listening" line
        self.root = f"http://127.0.0.1:{self.port}"

    def send(self, chat_id: int, text: str, message_id: int | None = None) -> None:
        """A private message from user `chat_id`. Runs on one workspace need a `message_id` unique
        across them: a repeated one is a replay memgate skips."""
        query = f"?user_id={chat_id}&text={urllib.parse.quote(text)}"
        if message_id is not None:
            query += f"&message_id={message_id}"
        request = urllib.request.Request(f"{self.root}/ctl/message{query}", method="POST")
        urllib.request.urlopen(request, timeout=10).close()

    def sent(self) -> list[dict[str, Any]]:
        """Every message the bot has sent."""
        with urllib.request.urlopen(f"{self.root}/ctl/sent", timeout=10) as response:
            result: list[dict[str, Any]] = json.loads(response.read())
            return result

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)
