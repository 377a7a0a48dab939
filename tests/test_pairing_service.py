"""Pairing and access reloads against a real `memgate run` subprocess and the fake Telegram."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.conftest import memgate, memgate_run, service_config, wait_for_log
from tests.fakes.llm import FakeLLM, last_user_text
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.timeout(120)

CODE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")


async def test_cli_approves_lists_and_revokes_while_the_service_runs(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """approve: the stranger's next DM is answered with a session; list shows them; revoke: not."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    sent = fake_telegram.sent
    sessions = tmp_path / "workspace" / "sessions"
    async with memgate_run(config, tmp_path) as (process, _):
        fake_telegram.message("let me in", user_id=666, chat_id=666, username="mallory")
        await fake_telegram.wait_for(lambda: len(sent(666)) == 1)
        [code] = set(CODE.findall(sent(666)[0]["text"]))
        status, out, err = await memgate("pairing", "list", "--config", str(config), home=tmp_path)
        assert status == 0 and f"{code}  telegram:666" in out, err
        status, out, err = await memgate(
            "pairing", "approve", code, "--config", str(config), home=tmp_path
        )
        assert status == 0 and "approved telegram:666" in out, err
        fake_telegram.message("thanks", user_id=666, chat_id=666, username="mallory")
        await fake_telegram.wait_for(lambda: len(sent(666)) == 2)
        assert sent(666)[1]["text"] == "echo: thanks"
        assert (sessions / "telegram:666.jsonl").exists()
        status, out, _ = await memgate("pairing", "list", "--config", str(config), home=tmp_path)
        assert "telegram:666  Alice  by cli" in out and "(none)" in out  # no code pending
        status, out, _ = await memgate("status", "--config", str(config), home=tmp_path)
        assert "dm_policy pairing" in out and "1 owner(s), 1 approved, 0 pending" in out
        status, out, err = await memgate(
            "pairing", "revoke", "telegram:666", "--config", str(config), home=tmp_path
        )
        assert status == 0 and "revoked telegram:666" in out, err
        fake_telegram.message("still there?", user_id=666, chat_id=666, username="mallory")
        fake_telegram.message("owner here", user_id=42, chat_id=42)  # judged after the above
        await fake_telegram.wait_for(lambda: len(sent(42)) == 1)
        pid = process.pid
    asked = [last_user_text(r) for r in fake_llm.chat_requests()]
    assert asked == ["thanks", "owner here"]
    # Revoked, they are a stranger again: no answer from the model, only a new code to ask with.
    assert all(CODE.search(m["text"]) for m in sent(666)[2:])
    assert pid == process.pid
    status, out, err = await memgate(
        "pairing", "approve", "ZZZZ2222", "--config", str(config), home=tmp_path
    )
    assert status == 1 and "no pending pairing code ZZZZ2222" in err


async def test_sighup_reloads_allow_from_without_a_restart(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """An id added to allow_from is answered after SIGHUP, same pid; other keys need a restart."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    # allowlist: a stranger gets silence (not a code), so being let in shows as the first reply.
    text = config.read_text()
    config.write_text(
        text.replace('allow_from: ["42"]', 'allow_from: ["42"]\n    dm_policy: allowlist')
    )
    sent = fake_telegram.sent
    log = tmp_path / "run.log"
    async with memgate_run(config, tmp_path) as (process, _):
        fake_telegram.message("before", user_id=777, chat_id=777, username="bob")
        fake_telegram.message("owner here", user_id=42, chat_id=42)
        await fake_telegram.wait_for(lambda: len(sent(42)) == 1)
        assert sent(777) == []
        config.write_text(
            config.read_text()
            .replace('allow_from: ["42"]', 'allow_from: ["42", "777"]')
            .replace("timeout: 20", "timeout: 25")
        )
        pid = process.pid
        process.send_signal(signal.SIGHUP)
        await wait_for_log(log, "config reloaded")
        fake_telegram.message("after", user_id=777, chat_id=777, username="bob")
        await fake_telegram.wait_for(lambda: len(sent(777)) == 1)
        assert sent(777)[0]["text"] == "echo: after"
        assert process.returncode is None and process.pid == pid
        await wait_for_log(log, "needs a restart")
    logged = log.read_text()
    assert "needs a restart to change llm.timeout" in logged
    assert logged.count("memgate started") == 1  # one start: reloaded, not restarted
    assert "allow_from" not in logged.split("needs a restart", 1)[1].splitlines()[0]
    assert "sk-attach-secret" not in logged
