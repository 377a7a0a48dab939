"""Errors raised by the memory package.

MemoryStoreError
├── TokenizerError        no tokenizer vocabulary could be loaded (never a silent 0)
├── VersionNotFoundError  `memory restore` named a version that does not exist
├── MemoryChangedError    MEMORY.md changed between a read and a compare-and-write
├── BudgetError           a request cannot be cut to fit the prompt budget
├── ModelCallError        the consolidation model call failed (raised by the caller's adapter)
│   └── UpdateRefusedError  its memory_update would drop too much of MEMORY.md: nothing written
├── SearchPathError       memory_get was given a path outside memory/ and sessions/, or no file
├── EmbeddingError        the embeddings endpoint failed or answered nonsense (search falls back)
└── HistoryNotLoadedError a session message before its loaded part was asked for
"""

from __future__ import annotations


class MemoryStoreError(Exception):
    """Base of the memory package's errors."""


class TokenizerError(MemoryStoreError):
    """The tokenizer's vocabulary could not be loaded from cache, bundle or network."""


class VersionNotFoundError(MemoryStoreError):
    """A MEMORY.md version that was asked for does not exist."""


class ModelCallError(MemoryStoreError):
    """The model call made for consolidation failed; `transient` says whether a retry may help."""

    def __init__(self, message: str, *, rejected_tool_choice: bool = False) -> None:
        super().__init__(message)
        self.rejected_tool_choice = rejected_tool_choice


class UpdateRefusedError(ModelCallError):
    """A consolidation's memory_update would drop more of MEMORY.md than allowed; nothing was
    written, and the job is retried like any failed call, with this reason given to the model."""


class SearchPathError(MemoryStoreError):
    """memory_get refused a path: absolute, with `..`, leading outside memory/ or sessions/, or missing."""


class EmbeddingError(MemoryStoreError):
    """An `Embedder` could not turn texts into vectors; search goes on with keywords alone."""


class MemoryChangedError(MemoryStoreError):
    """MEMORY.md no longer holds the text a compare-and-write expected; nothing was written."""


class BudgetError(MemoryStoreError):
    """A request cannot be made to fit the prompt budget, even with history dropped and cuts."""

    def __init__(self, needed: int, limit: int) -> None:
        super().__init__(f"the request needs {needed} tokens; the budget is {limit}")
        self.needed = needed
        self.limit = limit


class HistoryNotLoadedError(MemoryStoreError, LookupError):
    """A message before the loaded part of a session was asked for (it is consolidated and stays
    on disk; whatever needs the whole file reads it itself)."""
