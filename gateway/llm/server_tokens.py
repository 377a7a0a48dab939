"""What the model server says about its own token counts: its tokenizer endpoint, where it has one
(llama.cpp and vLLM `POST /tokenize`, llama-cpp-python `POST /extras/tokenize`), and the counts a
context-length refusal names. The budget's calibration (memory/calibration.py) learns from both.

Plain HTTP through aiohttp: these endpoints are no part of the OpenAI API, so the SDK has no call
for them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass

import aiohttp

log = logging.getLogger(__name__)


# How servers name the context they have: OpenAI, vLLM and llama-cpp-python ("maximum context
# length is 4096 tokens"), llama.cpp's engine ("context window of 4096"), llama.cpp's server
# ("available context size (4096 tokens)"), LM Studio ("context length of only 4096").
_WINDOW = re.compile(
    r"maximum context length is (\d+)|context window of (\d+)|context length of (?:only )?(\d+)"
    r"|available context size \((\d+) tokens|n_ctx\W{0,4}(\d+)",
    re.IGNORECASE,
)
# ... and the prompt's tokens by their count.
_PROMPT = re.compile(
    r"\((\d+) in the messages|\((\d+) in your prompt|messages resulted in (\d+) tokens"
    r"|has (\d+) input tokens|Requested tokens \((\d+)\)|keep the first (\d+) tokens"
    r"|request \((\d+) tokens\) exceeds"
    r"|n_prompt_tokens\W{0,4}(\d+)",
    re.IGNORECASE,
)
_REQUESTED = re.compile(r"you requested (\d+) tokens", re.IGNORECASE)  # prompt and answer
_ANSWER = re.compile(
    r"(\d+) in the completion|(\d+) for the completion|max_tokens'? is too large: (\d+)",
    re.IGNORECASE,
)
# A refusal for the context's sake that names no number (llama.cpp's server in its message).
_CONTEXT_WORDS = re.compile(
    r"exceeds? the available context size|context_length_exceeded|exceed_context_size"
    r"|maximum context length|context window",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ContextOverflow:
    """A prompt the server refused for its context: the prompt's tokens by the server's count
    and the most prompt tokens it has room for beside the answer, where the refusal says."""

    prompt_tokens: int | None
    room: int | None


def context_overflow(status: int | None, text: str) -> ContextOverflow | None:
    """The overflow a refusal (`status`, its message) describes; None if it is not one."""
    if status not in (400, 413, 422):
        return None
    window = _first(_WINDOW, text)
    if window is None and not _CONTEXT_WORDS.search(text):
        return None
    prompt = _first(_PROMPT, text)
    requested, answer = _first(_REQUESTED, text), _first(_ANSWER, text)
    if answer is None and requested is not None and prompt is not None:
        answer = requested - prompt
    room = None
    if window is not None:
        room = window - (answer or 0)
        if prompt is not None and requested is None and answer is None:
            room = window - 1  # llama.cpp's engine takes a prompt strictly under its window
    return ContextOverflow(prompt, room if room is not None and room > 0 else None)


def _first(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.search(text)
    if found is None:
        return None
    return next(int(group) for group in found.groups() if group is not None)


def server_root(base_url: str) -> str:
    """The server's root, where the tokenizer endpoints live: the base URL without its /v1."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


async def count_on_server(
    base_url: str, api_key: str, model: str, text: str, *, within: float
) -> int | None:
    """`text`'s tokens by the server's own tokenizer, asked `within` seconds; None where it has
    no tokenizer endpoint (a 404: most hosted APIs) or it fails to answer in time (a debug line;
    the budget learns otherwise). llama-cpp-python tokenizes only once its one slot is free."""
    root = server_root(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # llama.cpp reads `content`, vLLM `prompt` (each ignores the other); llama-cpp-python its own.
    attempts = (
        ("/tokenize", {"content": text, "prompt": text, "model": model}),
        ("/extras/tokenize", {"input": text, "model": model}),
    )
    try:
        async with asyncio.timeout(within), aiohttp.ClientSession(headers=headers) as client:
            for path, body in attempts:
                async with client.post(root + path, json=body) as response:
                    if response.status in (404, 405):
                        continue
                    if response.status != 200:
                        log.debug(
                            "tokenizer endpoint failed path=%s status=%s", path, response.status
                        )
                        return None
                    return _token_count(await response.json(content_type=None))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.debug("tokenizer endpoint unusable error=%s", type(exc).__name__)
    return None


def _token_count(answer: object) -> int | None:
    if not isinstance(answer, dict):
        return None
    count, tokens = answer.get("count"), answer.get("tokens")
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    return len(tokens) if isinstance(tokens, list) else None
