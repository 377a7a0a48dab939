"""Start-up loads only what the command uses: SDKs of unused features and the tokenizer's
vocabulary wait until something needs them."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
from pathlib import Path

import pytest

from gateway.collector import collector_paused
from gateway.llm.on_demand import OnDemand, preload
from gateway.service.app import Runtime
from memory.errors import TokenizerError
from memory.tokens import TokenCounter
from tests.conftest import RuntimeFactory, inbound, memgate
from tests.fakes.llm import FakeLLM, text
from tests.fakes.telegram_api import TOKEN

# Libraries a gateway loads only for a feature its config enables (or a file that arrives).
OPTIONAL = ("mcp", "telegram", "discord", "aiohttp.web", "pypdf", "PIL")

# Runs a memgate entry point in a fresh interpreter and prints, as it exits, which of OPTIONAL
# the process had imported by then.
_PROBE = """
import atexit, json, sys
optional = {optional!r}
atexit.register(lambda: print("LOADED " + json.dumps(sorted(
    name for name in optional if name in sys.modules))))
{body}
"""


async def probe(body: str, env: dict[str, str]) -> tuple[int, str, list[str]]:
    """Run `body` in a child interpreter; its exit status, stdout and the OPTIONAL it loaded."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROBE.format(optional=OPTIONAL, body=body),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    lines = out.decode().splitlines()
    loaded = [line for line in lines if line.startswith("LOADED ")]
    assert loaded, err.decode()
    return process.returncode or 0, "\n".join(lines), json.loads(loaded[-1].removeprefix("LOADED "))


async def test_chat_message_imports_no_channel_mcp_health_or_document_library(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """`memgate chat -m` answers without loading the chat SDKs, MCP, the web server, pypdf or PIL."""
    home = tmp_path / "home"
    await memgate("init", home=home)
    config = home / "config.yaml"
    config.write_text(config.read_text().replace("https://api.openai.com/v1", fake_llm.url))
    fake_llm.push(text("Hello from the fake model."))
    env = {"MEMGATE_HOME": str(home), "OPENAI_API_KEY": "sk-start-test-key-123456"}
    body = "from gateway.cli.main import main\nmain(['chat', '-m', 'hi there'])"
    code, out, loaded = await probe(body, env)
    assert code == 0 and "Hello from the fake model." in out
    assert loaded == []


async def test_run_imports_only_the_enabled_channel(tmp_path: Path, fake_llm: FakeLLM) -> None:
    """With only Telegram enabled, the service builds its channels without loading discord.py."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
llm: {{base_url: {fake_llm.url}, api_key: sk-start-test-key-123456, max_retries: 0}}
channels:
  telegram: {{enabled: true, token: "{TOKEN}", allow_from: ["42"]}}
"""
    )
    body = f"""
import asyncio
import gc
from pathlib import Path
from gateway.service.app import open_runtime
from gateway.config.file import load_config
from gateway.service.run import build_channels

async def main():
    config = load_config(Path({str(config)!r}), must_exist=True)
    async with open_runtime(config) as runtime:
        print("CHANNELS", [channel.name for channel in build_channels(config, runtime)])

asyncio.run(main())
"""
    code, out, loaded = await probe(body, {"MEMGATE_HOME": str(tmp_path / "home")})
    assert code == 0 and "CHANNELS ['telegram']" in out
    assert loaded == ["telegram"]


async def test_the_service_is_built_without_the_openai_sdk_and_its_first_turn_loads_it(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """memgate run's runtime and channels are built before the openai SDK is imported (it is half a
    second of the interpreter); the first message waits for that import and is answered."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
llm: {{base_url: {fake_llm.url}, api_key: sk-start-test-key-123456, max_retries: 0}}
channels:
  telegram: {{enabled: true, token: "{TOKEN}", allow_from: ["42"]}}
"""
    )
    fake_llm.push(text("answered after the import"))
    body = f"""
import asyncio
import sys
from pathlib import Path
from gateway.service.app import open_runtime
from gateway.config.file import load_config
from gateway.service.run import build_channels
from gateway.bus import InboundMessage

async def main():
    config = load_config(Path({str(config)!r}), must_exist=True)
    async with open_runtime(config) as runtime:
        build_channels(config, runtime)
        print("BUILT WITH OPENAI", "openai" in sys.modules)
        message = InboundMessage(
            channel="test", chat_id="42", sender_id="42", sender_is_owner=True, text="hi"
        )
        reply = await runtime.agent.handle(message)
        print("REPLY", reply.text, "OPENAI", "openai" in sys.modules)

asyncio.run(main())
"""
    code, out, _ = await probe(body, {"MEMGATE_HOME": str(tmp_path / "home")})
    assert code == 0, out
    assert "BUILT WITH OPENAI False" in out
    assert "REPLY answered after the import OPENAI True" in out


async def test_a_turn_that_fits_by_bytes_builds_no_vocabulary(
    runtime: Runtime, fake_llm: FakeLLM
) -> None:
    """A turn whose whole prompt fits the budget by bytes is answered, and its consolidation
    check done, without building the tokenizer's vocabulary."""
    assert not runtime.counter.loaded
    for word in ("hello", "and again"):
        fake_llm.push(text(f"re: {word}"))
        reply = await runtime.agent.handle(inbound(word))
        assert reply is not None and reply.text == f"re: {word}"
    await runtime.consolidator.wait_idle()
    assert [len(r["messages"]) for r in fake_llm.chat_requests()] == [2, 4]
    assert not runtime.counter.loaded


async def test_a_prompt_over_the_budget_in_bytes_is_counted_and_sent_whole(
    make_runtime: RuntimeFactory, fake_llm: FakeLLM
) -> None:
    """History that is over the budget in bytes but not in tokens builds the vocabulary and is
    sent whole, as exact counting decides."""
    # A budget of 13,952 tokens; the history below is ~24,000 bytes but ~4,500 tokens.
    async with make_runtime({"llm": {"context_window": 16000, "max_tokens": 1024}}) as runtime:
        session = await runtime.sessions.get("test:42")
        said = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i} " + "word " * 200}
            for i in range(24)
        ]
        await runtime.sessions.add_messages(session, said)
        assert runtime.agent.budget.at_most(said) > runtime.config.llm.budget
        assert not runtime.counter.loaded
        reply = await runtime.agent.handle(inbound("and now?"))
        assert reply is not None and not reply.failed
        assert runtime.counter.loaded
        sent = fake_llm.chat_requests()[0]["messages"]
        assert [m["content"] for m in sent[1:-1]] == [m["content"] for m in said]


def test_counters_of_one_model_share_one_encoding() -> None:
    """A second counter (a second runtime in the process) reuses the encoding already built."""
    first, second = TokenCounter("gpt-4o-mini"), TokenCounter("gpt-4o")
    assert first.encoding() is second.encoding()
    assert first.count("hello world") == second.count("hello world") == 2


def test_a_vocabulary_that_cannot_be_had_fails_at_start(no_vocabulary: None) -> None:
    """Offline with no bundled copy, building a counter raises at once, not at the first count."""
    with pytest.raises(TokenizerError, match="download failed"):
        TokenCounter("gpt-4o-mini")


class Client:
    """A closable client that counts how often it was made and closed."""

    made = 0

    def __init__(self) -> None:
        Client.made += 1
        self.closed = False

    async def close(self) -> None:
        self.closed = True


async def test_on_demand_client_is_made_once_at_first_use_and_closed_only_if_made() -> None:
    """An unused client is never made nor closed; a used one is made once and closed at exit."""
    Client.made = 0
    unused, used = OnDemand(Client), OnDemand(Client)
    await unused.close()
    assert Client.made == 0 and not unused.made
    first = used.get()
    assert used.get() is first and Client.made == 1
    await used.close()
    assert first.closed


def test_collector_is_paused_while_importing_and_enabled_again_even_after_an_error() -> None:
    """The garbage collector is off inside `collector_paused`, back on after it (error or not),
    and leaves what was made inside out of its later passes."""
    assert gc.isenabled()
    gc.unfreeze()
    try:
        with pytest.raises(ImportError), collector_paused():
            assert not gc.isenabled()
            assert gc.get_freeze_count() == 0
            raise ImportError("a module that failed to import")
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # this test process goes on making garbage of its own


async def test_the_models_sdk_is_preloaded_with_the_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`preload` (the openai SDK's import once the channels are up) runs the module's import
    with the collector off, and leaves it on again."""
    (tmp_path / "gc_probe.py").write_text("import gc\nENABLED = gc.isenabled()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    gc.unfreeze()
    try:
        await preload("gc_probe")
        assert gc.isenabled()
        assert sys.modules["gc_probe"].ENABLED is False
    finally:
        gc.unfreeze()
        sys.modules.pop("gc_probe", None)
