"""A streamed chat completion put back together: text pieces, tool-call fragments and usage.

The chunks are the decoded JSON of each server-sent event, as the openai SDK hands them over when
asked for no model (gateway/llm/provider.py owns `openai`): a reply of a few hundred chunks then builds
no pydantic object per chunk. This module imports nothing of ours; a chunk that is not a
completion chunk is a ValueError, which the provider reports as an unusable answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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

    def add(self, chunk: object) -> str:
        """Take one chunk; returns the answer text it adds ("" for none).

        Tool calls arrive as fragments keyed by their index: the first carries the id and the
        name, every one may carry a piece of the arguments' JSON text. Usage comes in a last chunk
        without choices when the request asked for it (`stream_options.include_usage`).
        """
        if not isinstance(chunk, dict):
            raise ValueError("a stream chunk is not a JSON object")
        self.chunks += 1
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("prompt_tokens"))
            self.completion_tokens = _count(usage.get("completion_tokens"))
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        reason = choice.get("finish_reason")
        if reason and isinstance(reason, str):
            self.finish_reason = reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        fragments = delta.get("tool_calls") or ()
        if not isinstance(fragments, list | tuple):
            raise ValueError("a stream chunk's tool_calls is not a list")
        for fragment in fragments:
            if isinstance(fragment, dict):
                self._add_fragment(fragment)
        piece = delta.get("content")
        if piece is not None and not isinstance(piece, str):
            raise ValueError("a stream chunk's content is not text")
        if piece:
            self.text.append(piece)
        return piece or ""

    def _add_fragment(self, fragment: dict[str, object]) -> None:
        index = fragment.get("index")
        parts = self._calls.setdefault(index if isinstance(index, int) else 0, _CallParts())
        call_id = fragment.get("id")
        parts.id = parts.id or (call_id if isinstance(call_id, str) else "")
        function = fragment.get("function")
        if isinstance(function, dict):
            name, arguments = function.get("name"), function.get("arguments")
            parts.name += name if isinstance(name, str) else ""
            parts.arguments.append(arguments if isinstance(arguments, str) else "")

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


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
