"""`/healthz` of `memgate run`: ready with the channels and the agent; MCP servers and embeddings
are reported beside the status, never waited for."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import listen_port, memgate_run, service_config
from tests.fakes.llm import FakeLLM, text
from tests.fakes.mcp_silent import silent_server
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.timeout(120)


async def health(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as client, client.get(url) as response:
        return response.status, json.loads(await response.text())


async def health_when(url: str, check: Any, within: float = 30) -> dict[str, Any]:
    """The first /healthz body that passes `check`, asked every 0.1 s."""
    async with asyncio.timeout(within):
        while True:
            try:
                status, body = await health(url)
                if check(status, body):
                    return body
            except aiohttp.ClientError:
                pass  # not listening yet
            await asyncio.sleep(0.1)


async def test_healthz_is_ready_while_an_mcp_server_is_still_starting(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Healthy and answering Telegram while a silent server starts; its state and a failed one's
    are shown beside the status, with the embeddings' (off)."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    port = listen_port()
    raw["health"] = {"listen": f"127.0.0.1:{port}"}
    raw["tools"] = {
        "mcp_servers": {
            "slow": silent_server(tmp_path / "slow.txt", start_timeout=60),
            "quick": silent_server(tmp_path / "quick.txt", start_timeout=1),
        }
    }
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    url = f"http://127.0.0.1:{port}/healthz"
    async with memgate_run(config, tmp_path):
        ready = await health_when(url, lambda status, body: status == 200)
        assert ready["status"] == "ok"
        assert ready["mcp"]["slow"] == {"state": "starting", "tools": 0}
        assert ready["embeddings"] == {"state": "off"}

        fake_llm.push(text("Hello while it starts"))
        fake_telegram.message("hi", chat_id=42, user_id=42)
        sent = await fake_telegram.wait_sent(1, within=30)
        assert "Hello while it starts" in sent[0]["text"]

        failed = await health_when(url, lambda _, body: body["mcp"]["quick"]["state"] == "failed")
        assert failed["status"] == "ok"
        assert failed["mcp"]["quick"] == {
            "state": "failed",
            "tools": 0,
            "error": "no answer within 1 s",
        }
        assert failed["mcp"]["slow"]["state"] == "starting"
