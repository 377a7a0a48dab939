"""Log redaction: secrets and bot tokens never reach the log output."""

from __future__ import annotations

import io
import logging

from gateway.logs import RedactingFilter, configure_logging


def test_secrets_and_bot_tokens_are_redacted_even_in_tracebacks() -> None:
    """Known secrets and anything shaped like a Telegram token become *** in every line."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(["sk-very-secret-key"]))
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


def test_request_urls_stay_out_of_info_logs() -> None:
    """At INFO, the libraries that log every request URL (httpx, PTB) are held at WARNING."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    quiet = [logging.getLogger(name) for name in ("httpx", "telegram")]
    levels = [logger.level for logger in quiet]
    try:
        configure_logging("INFO", ["secret"])
        assert all(logger.getEffectiveLevel() == logging.WARNING for logger in quiet)
        assert isinstance(root.handlers[0].filters[0], RedactingFilter)
    finally:
        root.handlers[:], root.level = saved
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)
