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


async def test_cli_rejects_codes_so_new_strangers_get_one_while_the_service_runs(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Three waiting codes lock a fourth stranger out; reject CODE and reject --all free the slots
    at once, and a rejected sender gets no new code."""
    config = service_config(tmp_path, fake_llm, fake_telegram)
    sent = fake_telegram.sent
    cli = ("--config", str(config))

    async def owner_answered(count: int) -> None:
        # The owner's message is judged after the strangers' before it: once it is answered,
        # theirs were handled (with a reply or without).
        fake_telegram.message("owner here", user_id=42, chat_id=42)
        await fake_telegram.wait_for(lambda: len(sent(42)) == count)

    async with memgate_run(config, tmp_path):
        for stranger in (601, 602, 603):
            fake_telegram.message("hi", user_id=stranger, chat_id=stranger, username="s")
        await fake_telegram.wait_for(lambda: all(len(sent(s)) == 1 for s in (601, 602, 603)))
        fake_telegram.message("me too", user_id=604, chat_id=604, username="jam")
        await owner_answered(1)
        assert sent(604) == []  # three codes wait: the cap holds
        [code] = set(CODE.findall(sent(601)[0]["text"]))
        status, out, err = await memgate("pairing", "reject", code.lower(), *cli, home=tmp_path)
        assert status == 0 and f"rejected {code} (telegram:601" in out, err
        fake_telegram.message("again", user_id=601, chat_id=601, username="s")
        await owner_answered(2)
        assert len(sent(601)) == 1  # rejected: no new code to ask with, though a place is free
        fake_telegram.message("me too", user_id=604, chat_id=604, username="jam")
        await fake_telegram.wait_for(lambda: len(sent(604)) == 1)
        assert CODE.search(sent(604)[0]["text"])
        status, out, err = await memgate("pairing", "reject", "--all", *cli, home=tmp_path)
        assert status == 0 and "rejected 3 pairing code(s)" in out, err
        for sender in ("telegram:602", "telegram:603", "telegram:604"):
            assert sender in out
        fake_telegram.message("hello", user_id=605, chat_id=605, username="new")
        await fake_telegram.wait_for(lambda: len(sent(605)) == 1)
        [fresh] = set(CODE.findall(sent(605)[0]["text"]))
        status, out, _ = await memgate("pairing", "list", *cli, home=tmp_path)
        assert f"{fresh}  telegram:605" in out and "telegram:601" in out
        status, out, err = await memgate("pairing", "reject", code, *cli, home=tmp_path)
        assert status == 1 and f"no pending pairing code {code}" in err
    assert [last_user_text(r) for r in fake_llm.chat_requests()] == ["owner here"] * 2
    status, out, err = await memgate("pairing", "reject", *cli, home=tmp_path)
    assert status == 2 and "CODE --all" in err
    status, out, err = await memgate("pairing", "reject", "--all", *cli, home=tmp_path)
    assert status == 0 and "rejected 1 pairing code(s): " in out and "telegram:605" in out, err
    status, out, err = await memgate("pairing", "reject", "--all", *cli, home=tmp_path)
    assert status == 0 and "no pairing codes were waiting" in out, err
