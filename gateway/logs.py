"""Logging setup for the CLI: one format, and one filter that redacts every secret memgate knows of.

python-telegram-bot and httpx put the bot token in the request URLs they log; rather than trust
each library, `RedactingFilter` scrubs the configured secrets (bot tokens, the webhook secret, API
keys) and anything shaped like a bot token from every record, tracebacks included, as `***`.
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
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets`, anything shaped like a bot token and any key-shaped word
    replaced by `***`: the one redactor of logs, error texts and replies."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "***")
    return _KEY_LIKE.sub("***", _BOT_TOKEN.sub("***", text))


class RedactingFilter(logging.Filter):
    """Rewrites each record it passes with its secrets redacted: the message, its arguments
    merged in, and the traceback text. On a handler it sees every record the handler writes."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        # Longest first, so a secret containing another is replaced whole.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True  # a malformed record: logging reports it when it formats the line
        clean = redact(message, self.secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True


def configure_logging(level: str, secrets: Iterable[str] = ()) -> None:
    """Send logs to stderr (journald picks them up under systemd), secrets redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
