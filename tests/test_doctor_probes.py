"""`memgate doctor`'s live probes: tool calling proven by a forced call, and every check bounded
and printed as it completes (the real CLI against the fake LLM and Bot API)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from memory.fileio import ensure_private_dir
from tests.conftest import memgate
from tests.fakes.llm import FakeLLM, start_fake_llm, text
from tests.fakes.telegram_api import TOKEN, FakeTelegram

pytestmark = pytest.mark.timeout(60)

FORCED_PING = {"type": "function", "function": {"name": "ping"}}


def probe_config(
    tmp_path: Path, llm_url: str, *, timeout: float = 30, telegram: str = "", extra: str = ""
) -> Path:
    """A config with the model at `llm_url` and, given a Bot API URL, Telegram enabled; `extra`:
    more YAML at the end."""
    ensure_private_dir(tmp_path / "workspace")
    ensure_private_dir(tmp_path / "state")
    path = tmp_path / "config.yaml"
    channel = (
        f"""\
channels:
  telegram:
    enabled: true
    token: "{TOKEN}"
    allow_from: ["42"]
    base_url: {telegram}
"""
        if telegram
        else ""
    )
    path.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
state_dir: {tmp_path / "state"}
llm:
  base_url: {llm_url}
  api_key: sk-doctor-secret-0123456789
  max_retries: 0
  timeout: {timeout}
{channel}{extra}"""
    )
    return path


def llm_line(out: str) -> str:
    [line] = [line for line in out.splitlines() if line[2:].startswith("llm:")]
    return line


async def test_doctor_forces_a_tool_call_and_says_tools_work(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """A server that answers a forced call with that tool's call is reported as supporting tools."""
    config = probe_config(tmp_path, fake_llm.url)
    code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    assert code == 0, out + err
    assert "tools supported" in llm_line(out)
    assert FORCED_PING in [request.get("tool_choice") for request in fake_llm.requests]


async def test_doctor_says_a_server_ignores_tools_when_a_forced_call_comes_back_as_text(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """A server that accepts tools but answers text to a forced call (as mockllm does) is named."""
    fake_llm.ignores_tools = True
    config = probe_config(tmp_path, fake_llm.url)
    code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    line = llm_line(out)
    assert code == 0, out + err
    assert line.startswith("✓ llm: ")
    assert (
        "tools ignored: the server answered text to a forced tool call; "
        "consolidation will use plain-text JSON mode" in line
    )
    assert "tools supported" not in line
    # The agent's own request (tools offered, nothing forced) was tried as well.
    offered = [request for request in fake_llm.requests if request.get("tools")]
    assert {str(request.get("tool_choice")) for request in offered} == {"None", str(FORCED_PING)}


async def test_doctor_prints_each_line_as_it_completes_and_bounds_a_hanging_model(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Against a model that never answers, every other line (Telegram's too) comes while the model
    still holds the request; the llm line comes last and says its timeout ran out."""
    held = asyncio.Event()
    for _ in range(3):
        fake_llm.push(text("too late"), hold=held)
    # The bound counts from doctor's start, imports included: 20 s leaves Telegram's SDK room
    # to load on a busy machine before the model's line ends the run.
    config = probe_config(tmp_path, fake_llm.url, timeout=20, telegram=fake_telegram.url)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "doctor", "--config", str(config)),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "MEMGATE_HOME": str(tmp_path)},
    )
    assert process.stdout is not None
    lines: list[tuple[str, int]] = []  # each line, and how many model requests were held then
    try:
        async with asyncio.timeout(30):
            while raw := await process.stdout.readline():
                lines.append((raw.decode().rstrip("\n"), fake_llm.in_flight))
            code = await process.wait()
    finally:
        held.set()
    names = [line.split(":")[0][2:] for line, _ in lines]
    assert names[0] == "config"
    assert names[-1] == "llm", lines
    assert {"workspace", "state", "lock", "telegram", "disk"} <= set(names[:-1])
    telegram = names.index("telegram")
    assert lines[telegram][1] >= 1, "the Telegram line waited for the model"
    last, still_held = lines[-1]
    assert last.startswith("✗ llm: ") and "no answer" in last
    assert "within 20 s (llm.timeout)" in last
    # Every request that reached the server was still held: the check gave up, not the server.
    assert still_held == len(fake_llm.chat_requests()), "the server gave up first, not the check"
    assert code == 1


async def test_doctor_counts_the_model_timeout_from_the_command_start(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """The llm check's bound counts from when doctor started (its imports are inside it): with the
    whole llm.timeout already spent, a held request is given up at once, not after the timeout."""
    from gateway.cli.doctor import check_llm
    from gateway.config.file import load_config

    held = asyncio.Event()
    fake_llm.push(text("too late"), hold=held)
    config = load_config(probe_config(tmp_path, fake_llm.url, timeout=1000), must_exist=True)
    try:
        check = await check_llm(config, since=time.monotonic() - 1000)
    finally:
        held.set()
    assert not check.ok
    assert "no answer from" in check.detail and "within 1000 s (llm.timeout)" in check.detail


async def test_doctor_names_a_model_the_server_does_not_list(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """A server that answers but does not list llm.model: ✗ naming the key and what it lists."""
    fake_llm.listed_models = ["SmolLM2-135M-Instruct", "other-model"]
    config = probe_config(tmp_path, fake_llm.url)
    code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    line = llm_line(out)
    assert code == 1, out + err
    assert line.startswith("✗ llm: llm.model 'gpt-4o-mini' is not among the models"), line
    assert "'SmolLM2-135M-Instruct', 'other-model'" in line
    assert "set llm.model to one of them" in line


async def test_doctor_leaves_the_model_unjudged_without_a_models_list(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """A server without /v1/models: the model is not judged, the check passes on its answers."""
    from gateway.cli.doctor import check_llm
    from gateway.config.file import load_config

    fake_llm.models_endpoint = False
    config = load_config(probe_config(tmp_path, fake_llm.url), must_exist=True)
    check = await check_llm(config)
    assert check.ok, check.detail
    assert check.detail.endswith("8 requests at once (default; the server does not say)")


@pytest.mark.parametrize(
    ("server", "said"),
    [
        ({"props_slots": 1}, "1 request at a time (server's /props)"),
        ({"props_slots": 4}, "4 requests at once (server's /props)"),
        ({"models_owned_by": "me"}, "1 request at a time (llama-cpp-python's server runs one"),
    ],
)
async def test_doctor_reports_the_endpoints_concurrency(
    tmp_path: Path, fake_llm: FakeLLM, server: dict[str, object], said: str
) -> None:
    """The llm line says how many requests the endpoint takes at once, and how that is known."""
    from gateway.cli.doctor import check_llm
    from gateway.config.file import load_config

    for name, value in server.items():
        setattr(fake_llm, name, value)
    config = load_config(probe_config(tmp_path, fake_llm.url), must_exist=True)
    check = await check_llm(config)
    assert check.ok, check.detail
    assert said in check.detail


async def test_doctor_checks_memory_llm_on_a_line_of_its_own(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """memory.llm set: a `memory.llm` line checks its endpoint and model (a forced tool call
    included) beside the llm line, and names its model when the server does not list it."""
    other, runner = await start_fake_llm()
    try:
        other.listed_models = ["big-model"]
        extra = f"memory:\n  llm:\n    base_url: {other.url}\n    model: small-model\n"
        config = probe_config(tmp_path, fake_llm.url, extra=extra)
        code, out, err = await memgate("doctor", "--config", str(config), home=tmp_path)
    finally:
        await runner.cleanup()
    [line] = [line for line in out.splitlines() if line[2:].startswith("memory.llm:")]
    assert code == 1, out + err
    assert llm_line(out).startswith("✓ llm: ")
    assert (
        "memory.llm.model 'small-model' is not among the models" in line and "'big-model'" in line
    )
    assert FORCED_PING in [request.get("tool_choice") for request in other.requests]
    assert {request["model"] for request in other.requests} == {"small-model"}
