"""Errors raised by the gateway package.

MemgateError
├── ConfigError            bad or missing configuration (exit status 78)
├── UsageError             a command was given arguments it cannot use
├── WorkspaceLockedError   another gateway holds the workspace
├── TranscriptionError     speech to text failed (the message is kept without a transcript)
└── LLMError               the chat model could not answer
    ├── LLMTimeoutError        no answer within llm.timeout
    ├── LLMConnectionError     the endpoint could not be reached
    ├── LLMBrokenStreamError   a stream the server broke off with an error after HTTP 200
    └── LLMStatusError         any HTTP error status
        ├── LLMRateLimitError      429; keeps retry_after
        └── LLMToolsUnsupportedError   the model cannot call tools

Task groups wrap what fails inside them in an ExceptionGroup; `leaf_errors` and `unwrap_group` are
the one place that takes such a group apart, and neither drops an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class MemgateError(Exception):
    """Base of every error memgate raises on purpose."""


class ConfigError(MemgateError):
    """The configuration is invalid: names the file, the key and the value."""

    def __init__(self, message: str, *, path: str = "", key: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class UsageError(MemgateError):
    """A command was given arguments it cannot use."""


class WorkspaceLockedError(MemgateError):
    """Another memgate process holds the workspace lock."""


class TranscriptionError(MemgateError):
    """The transcription endpoint could not turn an audio file into text; says why, in short."""


class LLMError(MemgateError):
    """The language model call failed.

    `user_message` is the short reply a group sees; `cause` names what the owner can change, for
    private chats, the log line and the terminal. The provider fills in `model` and `endpoint`
    (host:port, never a key) so both can say which model at which server failed.
    """

    user_message = "Sorry, the language model failed to answer. Please try again."
    status: int | None = None

    def __init__(self, message: str, *, model: str = "", endpoint: str = "") -> None:
        super().__init__(message)
        self.model = model
        self.endpoint = endpoint

    @property
    def cause(self) -> str:
        return f"the model's answer was unusable: {self}"


class LLMTimeoutError(LLMError):
    user_message = "Sorry, the language model did not answer in time. Please try again."

    @property
    def cause(self) -> str:
        return f"{self.endpoint or 'the model'} did not answer in time ({self}; see llm.timeout)"


class LLMConnectionError(LLMError):
    user_message = "Sorry, I could not reach the language model. Please try again later."

    @property
    def cause(self) -> str:
        return f"could not reach {self.endpoint or 'the model'} (llm.base_url: is the server up?)"


class LLMBrokenStreamError(LLMError):
    """The server answered HTTP 200, then sent an error event inside the stream (llama.cpp's
    way to fail once it has begun): its message is the server's own words."""

    user_message = "Sorry, the language model broke off its answer. Please try again."

    @property
    def cause(self) -> str:
        return str(self)


class LLMStatusError(LLMError):
    """Any HTTP error status; 401/403 and 404 have causes a person can fix in the config."""

    def __init__(self, message: str, status: int, *, model: str = "", endpoint: str = "") -> None:
        super().__init__(message, model=model, endpoint=endpoint)
        self.status = status

    @property
    def user_message(self) -> str:  # type: ignore[override]
        return (
            f"Sorry, the language model returned an error (HTTP {self.status}). Please try again."
        )

    @property
    def cause(self) -> str:
        if self.status in (401, 403):
            return f"the API key was refused (llm.api_key) by {self.endpoint}: {self}"
        if self.status == 404:
            return (
                f"model or URL not found (llm.model / llm.base_url — does it end in /v1?): "
                f"model {self.model!r} at {self.endpoint}"
            )
        return f"{self.endpoint} answered {self}"


class LLMRateLimitError(LLMStatusError):
    """429; keeps the server's retry-after."""

    user_message = "Sorry, the language model is rate-limiting me. Please try again in a moment."

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        *,
        model: str = "",
        endpoint: str = "",
    ) -> None:
        super().__init__(message, 429, model=model, endpoint=endpoint)
        self.retry_after = retry_after

    @property
    def cause(self) -> str:
        wait = f"; retry after {self.retry_after:.0f}s" if self.retry_after is not None else ""
        return f"{self.endpoint} is rate-limiting requests (HTTP 429){wait}"


class LLMToolsUnsupportedError(LLMStatusError):
    """The endpoint says this model cannot call tools (set llm.tools: off)."""

    @property
    def cause(self) -> str:
        return f"model {self.model!r} does not support tool calling (set llm.tools: off)"


def leaf_errors(error: BaseException) -> list[BaseException]:
    """Every error inside `error`, nested groups flattened, in order; `[error]` for a plain one."""
    if not isinstance(error, BaseExceptionGroup):
        return [error]
    return [leaf for inner in error.exceptions for leaf in leaf_errors(inner)]


def single_error(error: BaseException) -> BaseException:
    """The one error a group holds, or `error` itself when it holds several (none is lost)."""
    leaves = leaf_errors(error)
    return leaves[0] if len(leaves) == 1 else error


def describe_errors(error: BaseException, limit: int = 200) -> str:
    """One line naming every error inside `error`: each one's type and the first line of its text."""

    def one(leaf: BaseException) -> str:
        lines = str(leaf).splitlines()
        text = lines[0][:limit] if lines else ""
        return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__

    return "; ".join(one(leaf) for leaf in leaf_errors(error))


@contextmanager
def unwrap_group() -> Iterator[None]:
    """Let an error raised in the block through as itself rather than as a one-error group, so
    callers' `except SomeError` still match; a group of several errors passes unchanged."""
    try:
        yield
    except BaseExceptionGroup as group:
        error = single_error(group)
        if error is group:
            raise
        raise error from error.__cause__  # the SDK error it was translated from stays chained
