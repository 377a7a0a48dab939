"""Errors raised by the gateway package.

MemgateError
├── ConfigError            bad or missing configuration (exit status 78)
├── WorkspaceLockedError   another gateway holds the workspace
└── LLMError               the chat model could not answer
    ├── LLMTimeoutError        no answer within llm.timeout
    ├── LLMConnectionError     the endpoint could not be reached
    ├── LLMRateLimitError      429; keeps retry_after
    └── LLMStatusError         any other HTTP error status
"""

from __future__ import annotations


class MemgateError(Exception):
    """Base of every error memgate raises on purpose."""


class ConfigError(MemgateError):
    """The configuration is invalid: names the file, the key and the value."""

    def __init__(self, message: str, *, path: str = "", key: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class WorkspaceLockedError(MemgateError):
    """Another memgate process holds the workspace lock."""


class LLMError(MemgateError):
    """The language model call failed; `user_message` is safe to show to the person."""

    user_message = "Sorry, the language model failed to answer. Please try again."


class LLMTimeoutError(LLMError):
    user_message = "Sorry, the language model did not answer in time. Please try again."


class LLMConnectionError(LLMError):
    user_message = "Sorry, I could not reach the language model. Please try again later."


class LLMRateLimitError(LLMError):
    user_message = "Sorry, the language model is rate-limiting me. Please try again in a moment."

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMStatusError(LLMError):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status

    @property
    def user_message(self) -> str:  # type: ignore[override]
        return (
            f"Sorry, the language model returned an error (HTTP {self.status}). Please try again."
        )
