"""What the console reads and acts through: the running service's own objects, handed over by
`memgate run`, so a change made in a browser takes the path the CLI's takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from channels.pairing import PairingStore
from gateway.config.models import Config
from gateway.tools.jobs import JobTools
from memory.files import MemoryFiles
from memory.search.searcher import MemorySearch
from memory.tokens import TokenCounter


@dataclass
class Sources:
    config: Config
    memory: MemoryFiles  # the service's writer: its lock is consolidation's
    pairing: PairingStore  # the file `memgate pairing` changes, read by the channels
    jobs: JobTools  # the scheduler's operations, as `memgate jobs` reaches them
    counter: TokenCounter
    live: Callable[[], dict[str, Any]]  # channels, MCP servers, the consolidation queue
    owners: Callable[[], dict[str, list[str]]]  # allow_from in force, by channel
    search: MemorySearch | None = None
