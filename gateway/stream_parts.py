"""A streamed chat completion put back together: text pieces, tool-call fragments and usage.

The chunks are the openai SDK's `ChatCompletionChunk` objects, read by attribute only, so this
module imports no SDK (gateway/provider.py owns `openai`) and nothing else of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _CallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamParts:
    """What the chunks of one streamed completion said so far."""

    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    chunks: int = 0
    _calls: dict[int, _CallParts] = field(default_factory=dict)

    def add(self, chunk: Any) -> str:
        """Take one chunk; returns the answer text it adds ("" for none).

        Tool calls arrive as fragments keyed by their index: the first carries the id and the
        name, every one may carry a piece of the arguments' JSON text. Usage comes in a last chunk
        without choices when the request asked for it (`stream_options.include_usage`).
        """
        self.chunks += 1
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
            self.completion_tokens = getattr(usage, "completion_tokens", 0) or 0
        choices = getattr(chunk, "choices", None) or ()
        if not choices:
            return ""
        choice = choices[0]
        if choice.finish_reason:
            self.finish_reason = choice.finish_reason
        delta = choice.delta
        if delta is None:
            return ""
        for fragment in getattr(delta, "tool_calls", None) or ():
            parts = self._calls.setdefault(fragment.index, _CallParts())
            parts.id = parts.id or (fragment.id or "")
            function = fragment.function
            if function is not None:
                parts.name += function.name or ""
                parts.arguments.append(function.arguments or "")
        piece = getattr(delta, "content", None) or ""
        if piece:
            self.text.append(piece)
        return str(piece)

    @property
    def content(self) -> str | None:
        return "".join(self.text) if self.text else None

    def calls(self) -> list[tuple[str, str, str]]:
        """(id, name, arguments) of each tool call, in index order; the id made up when missing."""
        return [
            (parts.id or f"call_{index}", parts.name, "".join(parts.arguments) or "{}")
            for index, parts in sorted(self._calls.items())
            if parts.name
        ]
