"""The web console's door: login by a one-time ticket, 401 without a session, 421 for a foreign
Host, 403 for a POST without its CSRF token, and the security headers on every answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.console.keys import (
    TOKEN_FILE,
    USED_FILE,
    Tickets,
    console_secret,
    login_ticket,
)
from gateway.service.app import Runtime
from tests.conftest import RuntimeFactory, listen_port, memgate
from tests.console_client import client, login_url, serving

PAGES = [
    "/",
    "/memory",
    "/memory/edit",
    "/memory/diff?a=current&b=current",
    "/history",
    "/history?q=cat",
    "/chats",
    "/chats/view?key=test%3A42",
    "/jobs",
    "/access",
    "/status",
    "/static/console.css",
]
ACTIONS = {
    "/memory/edit": {"text": "# hacked\n", "seen": ""},
    "/memory/restore": {"version": "x", "seen": ""},
    "/access/approve": {"code": "ABCDEFGH"},
    "/access/reject": {"code": "ABCDEFGH"},
    "/access/revoke": {"address": "telegram:42"},
    "/jobs/pause": {"id": "x"},
    "/jobs/resume": {"id": "x"},
    "/jobs/remove": {"id": "x"},
}


@pytest.fixture
async def console_runtime(make_runtime: RuntimeFactory) -> AsyncIterator[Runtime]:
    async with make_runtime({"console": {"listen": f"127.0.0.1:{listen_port()}"}}) as runtime:
        yield runtime


async def test_without_a_session_every_page_and_action_is_401(console_runtime: Runtime) -> None:
    """No cookie, a forged cookie, a wrong ticket: 401 everywhere, and MEMORY.md untouched."""
    before = console_runtime.memory.read_memory()
    async with serving(console_runtime) as base, client(base) as browser:
        for path in PAGES:
            assert (await browser.get(path))[0] == 401, path
        for path, fields in ACTIONS.items():
            assert (await browser.post(path, fields, csrf=False))[0] == 401, path
        forged = {"memgate_console_" + base.rsplit(":", 1)[1]: "abc.9999999999.def"}
        assert (await browser.get("/memory", cookies=forged))[0] == 401
        assert await browser.login(f"{base}/login?ticket=nonce.9999999999.{'0' * 64}") == 401
        assert await browser.login(f"{base}/login") == 401
    assert console_runtime.memory.read_memory() == before


async def test_the_printed_url_logs_in_once(console_runtime: Runtime) -> None:
    """A ticket sets the session cookie once; the same URL again is refused, also after the
    console is served again."""
    url = login_url(console_runtime.config)
    async with serving(console_runtime) as base, client(base) as browser:
        assert await browser.login(url) == 303
        status, text = await browser.get("/memory")
        assert status == 200 and "Long-term Memory" in text
        async with client(base) as other:
            assert await other.login(url) == 401
            assert (await other.get("/memory"))[0] == 401
    # The console served again (a restart of memgate run): the ticket stays used.
    async with serving(console_runtime) as base, client(base) as again:
        assert await again.login(url) == 401
        assert await again.login(login_url(console_runtime.config)) == 303


async def test_a_post_without_its_csrf_token_is_refused(console_runtime: Runtime) -> None:
    """Logged in, a POST with no token, another session's token or a foreign Origin is 403."""
    before = console_runtime.memory.read_memory()
    async with serving(console_runtime) as base, client(base) as browser:
        await browser.login(login_url(console_runtime.config))
        status, _ = await browser.get("/memory/edit")
        assert status == 200 and browser.csrf
        fields = {"text": "# hacked\n", "seen": ""}
        assert (await browser.post("/memory/edit", fields, csrf=False))[0] == 403
        wrong = {**fields, "csrf": Tickets(b"another-secret-0123456789").csrf("x")}
        assert (await browser.post("/memory/edit", wrong, csrf=False))[0] == 403
        evil = {"Origin": "http://evil.example"}
        assert (await browser.post("/memory/edit", fields, headers=evil))[0] == 403
    assert console_runtime.memory.read_memory() == before


async def test_a_foreign_host_header_is_refused(console_runtime: Runtime) -> None:
    """Host: evil.example (DNS rebinding) is 421 even with a valid session and token."""
    async with serving(console_runtime) as base, client(base) as browser:
        await browser.login(login_url(console_runtime.config))
        await browser.get("/memory/edit")
        evil = {"Host": "evil.example"}
        status, text = await browser.get("/memory", headers=evil)
        assert status == 421 and "Long-term" not in text
        fields = {"text": "# rebound\n", "seen": ""}
        assert (await browser.post("/memory/edit", fields, headers=evil))[0] == 421
        assert await browser.login(login_url(console_runtime.config).replace(base, base)) == 303
        host = base.removeprefix("http://").replace("127.0.0.1", "localhost")
        assert (await browser.get("/memory", headers={"Host": host}))[0] == 200
    assert "rebound" not in console_runtime.memory.read_memory()


async def test_every_answer_carries_a_strict_policy(console_runtime: Runtime) -> None:
    """CSP without inline script or any other origin, no framing, no caching, no referrer out."""
    async with serving(console_runtime) as base, client(base) as browser:
        for path in ("/memory", "/static/console.css"):
            async with browser.session.get(base + path) as refused:
                assert refused.status == 401
                assert "default-src 'none'" in refused.headers["Content-Security-Policy"]
        await browser.login(login_url(console_runtime.config))
        async with browser.session.get(base + "/memory") as page:
            policy = page.headers["Content-Security-Policy"]
            assert "script-src" not in policy and "unsafe" not in policy
            assert "frame-ancestors 'none'" in policy
            assert page.headers["Cache-Control"] == "no-store"
            assert page.headers["Referrer-Policy"] == "same-origin"
            html = await page.text()
        assert "<script" not in html and "http://" not in html and "https://" not in html
        assert "sk-test-secret" not in html


def test_the_token_is_private_and_made_once(tmp_path: Path) -> None:
    """The token file is 0600, the same for every caller; a ticket of another token is refused."""
    secret = console_secret(tmp_path / "state")
    assert console_secret(tmp_path / "state") == secret
    assert (tmp_path / "state" / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    tickets = Tickets(secret)
    assert not tickets.take(login_ticket(b"not-the-secret-0123456789"))
    ticket = login_ticket(secret, now=1000.0)
    assert not tickets.take(ticket, now=2000.0)  # expired after ten minutes
    assert tickets.take(login_ticket(secret))


def test_taken_tickets_are_kept_until_they_expire(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tickets taken are kept on disk until they expire; a file cut by a crash or edited
    by hand is logged and taken as none, and the next login writes it whole again; a file that
    cannot be written is logged, and the login goes on."""
    secret = console_secret(tmp_path)
    used = tmp_path / USED_FILE
    old = login_ticket(secret, now=1000.0)
    assert Tickets(secret, used).take(old, now=1100.0)
    assert not Tickets(secret, used).take(old, now=1200.0)  # a restart: still used
    fresh = login_ticket(secret, now=5000.0)
    assert Tickets(secret, used).take(fresh, now=5000.0)
    assert list(json.loads(used.read_text())) == [fresh.split(".")[0]]  # the expired forgotten
    used.write_text('{"cut')
    tickets = Tickets(secret, used)
    assert "console used-ticket file unreadable" in caplog.text
    assert tickets.take(login_ticket(secret)) and len(json.loads(used.read_text())) == 1
    blocked = Tickets(secret, tmp_path / "a-folder")
    (tmp_path / "a-folder").mkdir()  # cannot be written: the login goes on, the use is logged
    ticket = login_ticket(secret)
    assert blocked.take(ticket) and not blocked.take(ticket)
    assert "console used tickets not saved" in caplog.text


async def test_memgate_console_names_the_missing_key(tmp_path: Path) -> None:
    """Without console.listen, `memgate console` exits 78 naming the key; with it, a URL, and a
    warning while nothing serves the console there."""
    config = tmp_path / "config.yaml"
    config.write_text(f"workspace: {tmp_path / 'workspace'}\nstate_dir: {tmp_path / 'state'}\n")
    status, out, err = await memgate("console", "--config", str(config), home=tmp_path)
    assert status == 78 and "console.listen is not set" in err and out == ""
    port = listen_port()
    with config.open("a") as more:
        more.write(f"console:\n  listen: 0.0.0.0:{port}\n")
    status, out, err = await memgate("console", "--config", str(config), home=tmp_path)
    assert status == 0, err
    assert out.startswith(f"http://127.0.0.1:{port}/login?ticket=") and f"ssh -L {port}:" in err
    assert f"Nothing answers at 127.0.0.1:{port} now: start memgate run" in err
    assert (tmp_path / "state" / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)
    async with server:
        status, out, err = await memgate("console", "--config", str(config), home=tmp_path)
    assert status == 0 and out.startswith(f"http://127.0.0.1:{port}/login?ticket=")
    assert "Nothing answers" not in err
