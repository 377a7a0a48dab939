"""Log redaction: secrets and bot tokens never reach the log output."""

from __future__ import annotations

import io
import logging

from gateway.logs import RedactingFormatter


def test_secrets_and_bot_tokens_are_redacted_even_in_tracebacks() -> None:
    """Known secrets and anything shaped like a Telegram token become *** in every line."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(message)s", ["sk-very-secret-key"]))
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning(
            "GET https://api.telegram.org/bot123456789:AAHk-abcdefghijklmnopqrstuvwxyz012345/getMe"
        )
        logger.warning("download /file/bot123456789%3AAAHk-abcdefghijklmnopqrstuvwxyz012345/p.jpg")
        try:
            raise RuntimeError("key sk-very-secret-key rejected")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert "AAHk-abc" not in output and "sk-very-secret-key" not in output
    assert output.count("***") >= 4
