"""Logging setup for the CLI: one format, and redaction of every secret memgate knows of.

python-telegram-bot and httpx put the bot token in the request URLs they log; rather than trust
each library, the formatter scrubs known secrets and anything shaped like a bot token from every
line, tracebacks included.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable

# Telegram bot tokens: "<digits>:<35 url-safe characters>", the colon URL-encoded in file URLs.
_BOT_TOKEN = re.compile(r"(?<!\d)\d{6,12}(?::|%3[Aa])[A-Za-z0-9_-]{30,}")
# API keys as providers echo them ("Incorrect API key provided: sk-proj-ab***xyz").
_KEY_LIKE = re.compile(r"\b(?:sk|key|gsk|xai)-[A-Za-z0-9_*\-]{6,}")
# Noisy libraries that log request URLs at INFO.
_QUIET = ("httpx", "httpx2", "httpcore", "telegram", "telegram.ext", "discord", "openai", "aiohttp")


class RedactingFormatter(logging.Formatter):
    """Formats as usual, then replaces secrets with `***`."""

    def __init__(self, fmt: str, secrets: Iterable[str] = ()) -> None:
        super().__init__(fmt)
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self.secrets)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets`, anything shaped like a bot token and any key-shaped word
    replaced by `***`: the one redactor of logs, error texts and replies."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "***")
    return _KEY_LIKE.sub("***", _BOT_TOKEN.sub("***", text))


def configure_logging(level: str, secrets: Iterable[str] = ()) -> None:
    """Send logs to stderr (journald picks them up under systemd), secrets redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
