"""`memgate run` end to end: a subprocess with Telegram against the fakes, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import listen_port, memgate, wait_for_log
from tests.fakes.discord_api import (
    ALICE,
    DM,
    FakeDiscord,
)
from tests.fakes.llm import FakeLLM, text
from tests.fakes.telegram_api import TOKEN, FakeTelegram

pytestmark = pytest.mark.timeout(120)


def write_config(
    tmp_path: Path, llm: FakeLLM, telegram: FakeTelegram, discord: FakeDiscord, port: int
) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"""\
workspace: {tmp_path / "workspace"}
llm:
  base_url: {llm.url}
  api_key: ${{OPENAI_API_KEY}}
  max_retries: 0
  timeout: 20
channels:
  telegram:
    enabled: true
    token: ${{TELEGRAM_BOT_TOKEN}}
    allow_from: ["42"]
    base_url: {telegram.url}
    base_file_url: {telegram.file_url}
  discord:
    enabled: true
    token: ${{DISCORD_BOT_TOKEN}}
    allow_from: ["{ALICE["id"]}"]
    api_base: {discord.api_base}
    gateway_url: {discord.gateway_url}
health:
  listen: 127.0.0.1:{port}
shutdown_grace: 5
"""
    )
    return path


SECRETS = {
    "OPENAI_API_KEY": "sk-service-test-secret-98765",
    "TELEGRAM_BOT_TOKEN": TOKEN,
    "DISCORD_BOT_TOKEN": FakeDiscord.token,
}


async def start(config: Path, log: Path) -> asyncio.subprocess.Process:
    handle = log.open("ab")
    try:
        return await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gateway", "run", "--config", str(config)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=handle,
            stderr=handle,
            env={**os.environ, **SECRETS, "MEMGATE_HOME": str(config.parent / "home")},
        )
    finally:
        handle.close()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as client, client.get(url) as response:
        return response.status, await response.text()


async def wait_healthy(url: str, process: asyncio.subprocess.Process) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            assert process.returncode is None, "memgate run exited early"
            try:
                status, body = await get(url)
                if status == 200:
                    document: dict[str, Any] = json.loads(body)
                    return document
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)


async def test_run_answers_reports_health_and_stops_cleanly_on_sigterm(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram, fake_discord: FakeDiscord
) -> None:
    """Telegram and Discord are answered, health and metrics are real, a second run is refused,
    and SIGTERM mid-turn still answers, exits 0 and leaves every file valid."""
    port = listen_port()
    config = write_config(tmp_path, fake_llm, fake_telegram, fake_discord, port)
    log = tmp_path / "memgate.log"
    process = await start(config, log)
    try:
        health = await wait_healthy(f"http://127.0.0.1:{port}/healthz", process)
        assert health["channels"] == {
            "telegram": {"connected": True},
            "discord": {"connected": True},
        }

        fake_llm.push(text("Hello Alice!"))
        fake_telegram.message("hi there", chat_id=42, user_id=42)
        sent = await fake_telegram.wait_sent(1, within=30)
        assert sent[0]["chat_id"] == 42 and "Hello Alice!" in sent[0]["text"]

        fake_llm.push(text("Hello from Discord!"))
        await fake_discord.send_message(DM, ALICE, "hi on discord")
        await fake_discord.wait_for(lambda: len(fake_discord.sent(DM)) == 1)
        assert fake_discord.sent(DM)[0]["content"] == "Hello from Discord!"

        status, metrics = await get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert 'memgate_messages_in_total{channel="telegram"} 1.0' in metrics
        assert 'memgate_messages_in_total{channel="discord"} 1.0' in metrics
        assert "memgate_llm_latency_seconds_count 2.0" in metrics
        assert "memgate_consolidation_queue_depth" in metrics

        second = await start(config, tmp_path / "second.log")
        assert await asyncio.wait_for(second.wait(), 60) != 0
        refusal = (tmp_path / "second.log").read_text()
        assert f"pid {process.pid}" in refusal and "already running" in refusal

        release = asyncio.Event()
        fake_llm.push(text("Here is the slow answer."), hold=release)
        fake_telegram.message("a slow question", chat_id=42, user_id=42)
        await fake_llm.wait_for_requests(3, kind="chat", within=30)
        process.send_signal(signal.SIGTERM)
        await wait_for_log(log, "received SIGTERM; stopping")  # mid-turn, the stop has begun
        release.set()
        assert await asyncio.wait_for(process.wait(), 60) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    sent = fake_telegram.sent(42)
    assert any("slow answer" in m["text"] for m in sent)
    workspace = tmp_path / "workspace"
    session = workspace / "sessions" / "telegram:42.jsonl"
    records = [json.loads(line) for line in session.read_text().splitlines()]
    users = [r["content"] for r in records if r.get("role") == "user"]
    assert users == ["hi there", "a slow question"]
    assert (workspace / "memory" / "MEMORY.md").read_text().startswith("# Long-term Memory")
    output = log.read_text()
    assert "memgate stopped cleanly" in output
    for secret in SECRETS.values():
        assert secret not in output
        assert secret.split(":")[-1] not in output
    discord_session = workspace / "sessions" / f"discord:{DM}.jsonl"
    assert "hi on discord" in discord_session.read_text()
    for path in workspace.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            json.loads(line)
        assert SECRETS["OPENAI_API_KEY"] not in path.read_text()


async def test_run_without_channels_exits_78(tmp_path: Path) -> None:
    """With no channel enabled, `memgate run` refuses with 78 and says how to enable one."""
    config = tmp_path / "config.yaml"
    config.write_text(f"workspace: {tmp_path / 'ws'}\nllm:\n  api_key: x\n")
    code, _, err = await memgate("run", "--config", str(config), home=tmp_path / "home")
    assert code == 78
    assert "channels.telegram.enabled: true" in err


async def test_a_channel_refusing_the_configuration_exits_78(
    tmp_path: Path, fake_llm: FakeLLM, fake_discord: FakeDiscord
) -> None:
    """Discord refusing the message content intent stops `memgate run` with 78, said in one line."""
    fake_discord.close_on_identify = 4014
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""\
workspace: {tmp_path / "ws"}
llm: {{base_url: {fake_llm.url}, api_key: x}}
channels:
  discord:
    enabled: true
    token: {FakeDiscord.token}
    allow_from: ["1"]
    api_base: {fake_discord.api_base}
    gateway_url: {fake_discord.gateway_url}
"""
    )
    code, _, err = await memgate("run", "--config", str(config), home=tmp_path / "home")
    assert code == 78
    last = err.strip().splitlines()[-1]
    assert last.startswith("memgate: configuration error:") and "MESSAGE CONTENT" in last
