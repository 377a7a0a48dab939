"""The console in a real browser (headless chromium) against `memgate run`, the fake Telegram and
the fake model: what an owner does with it, end to end.

With MEMGATE_CONSOLE_SCREENSHOTS=<folder> the test also saves a screenshot of each page there
(docs/console/ holds the README's)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gateway.automation.jobs import JobStore, new_job
from memory.files import MemoryFiles
from tests.browser import chromium
from tests.conftest import listen_port, memgate, memgate_run, service_config
from tests.fakes.llm import FakeLLM
from tests.fakes.telegram_api import FakeTelegram

pytestmark = pytest.mark.timeout(240)

CODE = re.compile(r"\b[A-HJ-NP-Z2-9]{8}\b")
OLDER = """# Long-term Memory

## User Information

- Name: Alice; lives in Porto, works as a marine biologist.
- Has a cat called Miso.

## Preferences

- Short answers; metric units.
"""
NEWER = OLDER.replace("Has a cat called Miso.", "Has a cat called Miso, and a new puppy, Tofu.")
HISTORY = [
    "[2026-12-01 08:12] Alice asked for a packing list for a research cruise in the Azores.",
    "[2026-12-02 19:40] Alice said Miso has been unwell; she booked the vet for Friday.",
    "[2026-12-03 07:05] Alice adopted a puppy called Tofu and asked about house training.",
]


def prepare(tmp_path: Path) -> tuple[str, Path]:
    """A workspace with two versions of MEMORY.md, a history and a job; the job's id."""
    tz = ZoneInfo("UTC")
    files = MemoryFiles(tmp_path / "workspace", tz)
    files.dir.mkdir(parents=True)
    files.write_memory(OLDER)
    files.write_memory(NEWER)
    for index, entry in enumerate(HISTORY):
        files.append_history(entry, entry_id=f"seed{index}")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    job = new_job(
        session="telegram:42", channel="telegram", chat_id="42", now=1.8e9, tz=tz,
        cron="0 9 * * 1-5", message="Stand-up notes are due",
    )  # fmt: skip
    JobStore(state).put(job)
    return job.id, state


async def test_an_owner_logs_in_restores_approves_and_pauses_in_a_browser(
    tmp_path: Path, fake_llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    """Log in with the URL `memgate console` prints, see a fact from MEMORY.md, restore an older
    version (the file changes), approve a stranger's code (their next message is answered) and
    pause a job (the job file says so)."""
    shots = os.environ.get("MEMGATE_CONSOLE_SCREENSHOTS")
    folder = Path(shots) if shots else None
    job_id, state = prepare(tmp_path)
    config = service_config(tmp_path, fake_llm, fake_telegram)
    port = listen_port()
    with config.open("a") as extra:
        extra.write(f"console:\n  listen: 127.0.0.1:{port}\n")
    sent = fake_telegram.sent
    memory_md = tmp_path / "workspace" / "memory" / "MEMORY.md"
    async with memgate_run(config, tmp_path), chromium() as browser:
        fake_telegram.message("Any plans for the weekend?", user_id=42, chat_id=42)
        fake_telegram.message(
            "hello, can I talk to the bot?", user_id=666, chat_id=666, username="bob"
        )
        await fake_telegram.wait_for(lambda: len(sent(42)) == 1 and len(sent(666)) == 1)
        [code] = set(CODE.findall(sent(666)[0]["text"]))
        status, out, err = await memgate("console", "--config", str(config), home=tmp_path)
        assert status == 0, err
        url = out.strip()
        assert url.startswith(f"http://127.0.0.1:{port}/login?ticket=")

        await browser.open(url)
        page = await browser.wait_text("Kept versions")
        assert "Has a cat called Miso, and a new puppy, Tofu." in page
        if folder:
            await browser.screenshot(folder / "memory.png")
        [older] = [
            p.name
            for p in MemoryFiles(tmp_path / "workspace", ZoneInfo("UTC")).list_versions()
            if "puppy" not in p.read_text()
        ]
        await browser.click(
            f"//tr[td[1][normalize-space()='{older}']]//button[normalize-space()='Restore']"
        )
        await browser.wait_text(f"Restored MEMORY.md from {older}")
        assert memory_md.read_text() == OLDER

        await browser.open(f"http://127.0.0.1:{port}/access")
        await browser.wait_text(code)
        if folder:
            await browser.screenshot(folder / "access.png")
        await browser.click(
            f"//tr[td/code[normalize-space()='{code}']]//button[normalize-space()='Approve']"
        )
        await browser.wait_text("Approved telegram:666")
        fake_telegram.message("thanks!", user_id=666, chat_id=666, username="bob")
        await fake_telegram.wait_for(lambda: len(sent(666)) == 2)
        assert sent(666)[1]["text"] == "echo: thanks!"

        await browser.open(f"http://127.0.0.1:{port}/jobs")
        await browser.wait_text("Stand-up notes are due")
        await browser.click(
            f"//tr[td/code[normalize-space()='{job_id}']]//button[normalize-space()='Pause']"
        )
        await browser.wait_text(f"Paused job {job_id}.")
        paused = JobStore(state).get(job_id)
        assert paused is not None and paused.paused == "paused by the owner"
        if folder:
            await browser.screenshot(folder / "jobs.png")
            for name, path in (
                ("history", "/history"),
                ("chats", "/chats"),
                ("chat", "/chats/view?key=telegram%3A666"),
                ("status", "/status"),
                ("diff", f"/memory/diff?a={older}&b=current"),
            ):
                await browser.open(f"http://127.0.0.1:{port}{path}")
                await browser.wait_text("memgate")
                await browser.screenshot(folder / f"{name}.png")
