"""What `memgate init` and `memgate setup` write: the file's comments and order kept, and a key
asked for only where the endpoint needs one."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.conftest import converse, memgate
from tests.fakes.llm import FakeLLM


async def test_setup_keeps_every_comment_and_the_key_order(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """`memgate setup` on a config `init` wrote and its owner annotated changes the llm keys it
    asked about and not one other character: comments (init's and the owner's), order, spacing."""
    home = tmp_path / "home"
    code, _, err = await memgate("init", home=home)
    assert code == 0, err
    config = home / "config.yaml"
    annotated = (
        config.read_text()
        .replace("timezone: UTC\n", "# I live in Berlin\ntimezone: Europe/Berlin  # since 2020\n")
        .replace("  model: gpt-4o-mini\n", "  model: gpt-4o-mini   # cheap\n  # my own note\n")
        + "# the end\n"
    )
    config.write_text(annotated)
    answers = [("endpoint", fake_llm.url), ("API key", ""), ("Model", "new-model")]
    env = {**os.environ, "MEMGATE_HOME": str(home), "OPENAI_API_KEY": "sk-env-0123456789"}
    code, output = await asyncio.to_thread(converse, ["setup"], answers, env)
    assert code == 0, output
    assert "✓ model 'new-model'" in output
    expected = annotated.replace(
        "  base_url: https://api.openai.com/v1\n", f"  base_url: {fake_llm.url}\n"
    ).replace("  model: gpt-4o-mini   # cheap\n", "  model: new-model     # cheap\n")
    assert config.read_text() == expected
    assert oct(config.stat().st_mode & 0o777) == "0o600"


async def test_init_then_a_local_endpoint_needs_no_key(
    tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `memgate init`, with OPENAI_API_KEY unset: at OpenAI's URL `chat` exits 78 naming the
    variable; with llm.base_url pointed at a local server it answers."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    home = tmp_path / "home"
    code, _, err = await memgate("init", home=home)
    assert code == 0, err
    for command in (("chat", "-m", "hi"), ("memory", "consolidate", "--all")):
        code, out, err = await memgate(*command, home=home)
        assert code == 78 and out == "" and err.count("\n") == 1, err
        assert "OPENAI_API_KEY" in err and "llm.api_key" in err
    config = home / "config.yaml"
    config.write_text(config.read_text().replace("https://api.openai.com/v1", fake_llm.url))
    code, out, err = await memgate("chat", "-m", "hi", home=home)
    assert (code, out.strip()) == (0, "echo: hi"), err
