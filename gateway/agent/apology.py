"""What a failed turn tells its chat and the log: one short reply naming the cause, one log line.

The agent's error boundary calls `apology` for any failure of a turn. A private chat is the
owner's and reads the cause; a group learns only the kind of failure, never configuration talk.
"""

from __future__ import annotations

import logging

from gateway.bus import InboundMessage
from gateway.errors import LLMError, describe_errors, leaf_errors
from gateway.logs import redact

# Under the agent's name: a turn's lines, failed or not, come from one logger.
log = logging.getLogger("gateway.agent.loop")


def apology(message: InboundMessage, error: BaseException, model: str) -> str:
    """Log a failed turn in one line (traceback at DEBUG) and say, in short, what went wrong."""
    # A task group may have wrapped the failure; every error in it is logged, none dropped.
    leaves = leaf_errors(error)
    llm = next((leaf for leaf in leaves if isinstance(leaf, LLMError)), None)
    log.debug("turn failure traceback session=%s", message.key, exc_info=error)
    if llm is not None:
        # One line an operator can act on.
        log.warning(
            "llm failed session=%s kind=%s status=%s model=%s endpoint=%s error=%s",
            message.key,
            type(llm).__name__,
            llm.status or "-",
            llm.model or model,
            llm.endpoint or "-",
            llm,
        )
        return llm.user_message if message.is_group else f"Sorry, I could not answer: {llm.cause}."
    described = redact(describe_errors(error), ())
    log.error("turn failed session=%s error=%s", message.key, described)
    cause = ", ".join(type(leaf).__name__ for leaf in leaves) if message.is_group else described
    return f"Sorry, something went wrong while answering ({cause}). The error has been logged."
