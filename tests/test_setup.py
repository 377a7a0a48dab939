"""First-run questions and `memgate setup`: the answers are tested with one call before writing."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import yaml

from tests.conftest import converse
from tests.fakes.llm import FakeLLM, error


async def test_first_run_offers_to_fix_a_refused_model(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """A model the endpoint does not know is reported before anything is written; the second
    answers pass and the chat goes on."""
    home = tmp_path / "home"
    fake_llm.push(error(404, "The model `gpt-9` does not exist"))
    answers = [
        ("endpoint", fake_llm.url),
        ("API key", "sk-first-run-key-123456"),
        ("Model", "gpt-9"),
        ("Fix the answers", ""),
        ("endpoint", ""),
        ("API key", ""),
        ("Model", "gpt-4o-mini"),
    ]
    env = {**os.environ, "MEMGATE_HOME": str(home), "OPENAI_API_KEY": ""}
    code, output = await asyncio.to_thread(converse, ["chat", "-m", "hello there"], answers, env)
    assert code == 0, output
    assert "✗ model or URL not found (llm.model / llm.base_url" in output
    assert "echo: hello there" in output
    written = yaml.safe_load((home / "config.yaml").read_text())
    assert written["llm"]["model"] == "gpt-4o-mini"
    assert written["llm"]["api_key"] == "sk-first-run-key-123456"


async def test_setup_rewrites_the_llm_keys_and_keeps_the_rest(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """`memgate setup` asks again on an existing config; other keys stay (a `${VAR}` key stays a
    reference, never the secret), the file stays 0600."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'ws'}\ntimezone: Europe/Berlin\n"
        "llm:\n  base_url: http://127.0.0.1:9/v1\n  api_key: ${MY_LLM_KEY}\n"
        "  model: old-model\n  context_window: 32000\n"
    )
    answers = [("endpoint", fake_llm.url), ("API key", ""), ("Model", "new-model")]
    env = {**os.environ, "MEMGATE_HOME": str(tmp_path / "home"), "MY_LLM_KEY": "sk-env-0123456789"}
    code, output = await asyncio.to_thread(
        converse, ["setup", "--config", str(config)], answers, env
    )
    assert code == 0, output
    assert "✓ model 'new-model'" in output
    written = yaml.safe_load(config.read_text())
    assert written["timezone"] == "Europe/Berlin" and written["llm"]["context_window"] == 32000
    assert written["llm"] == {
        "base_url": fake_llm.url,
        "api_key": "${MY_LLM_KEY}",
        "model": "new-model",
        "context_window": 32000,
    }
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    tested = fake_llm.requests[0]  # then the same model, forced to call a tool
    assert {request["model"] for request in fake_llm.requests} == {"new-model"}
    assert tested["_headers"]["authorization"] == "Bearer sk-env-0123456789"
