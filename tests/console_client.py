"""The web console in tests: served by the real wiring of `memgate run` (gateway/service/run.py's
`web_console`) over a runtime, and a client that logs in with a printed ticket and posts its forms
with the page's CSRF token, as a browser would."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from html import unescape
from typing import Any

import aiohttp

from gateway.config.models import Config
from gateway.console.keys import console_secret, login_ticket
from gateway.service.access import AccessInForce
from gateway.service.app import Runtime
from gateway.service.run import optional_states, web_console

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def with_console(config: Config, port: int) -> Config:
    """`config` with the console on 127.0.0.1:`port`."""
    console = config.console.model_copy(update={"listen": f"127.0.0.1:{port}"})
    return config.model_copy(update={"console": console})


def login_url(config: Config) -> str:
    """The URL `memgate console` prints: a fresh one-time ticket."""
    listen = config.console.listen
    return f"http://{listen}/login?ticket={login_ticket(console_secret(config.state_dir))}"


class ConsoleClient:
    """A browser's side: a cookie jar, the last page's CSRF token, no redirects followed unasked."""

    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        self.base = base
        self.session = session
        self.csrf = ""

    async def login(self, url: str) -> int:
        async with self.session.get(url, allow_redirects=False) as response:
            return response.status

    async def get(self, path: str, **options: Any) -> tuple[int, str]:
        async with self.session.get(self.base + path, allow_redirects=False, **options) as answer:
            text = await answer.text()
        if found := CSRF.search(text):
            self.csrf = unescape(found.group(1))
        return answer.status, text

    async def post(
        self, path: str, fields: dict[str, str], *, csrf: bool = True, **options: Any
    ) -> tuple[int, str, str]:
        """POST a form; (status, body, Location) without following the redirect."""
        data = {**fields, **({"csrf": self.csrf} if csrf else {})}
        async with self.session.post(
            self.base + path, data=data, allow_redirects=False, **options
        ) as answer:
            return answer.status, await answer.text(), answer.headers.get("Location", "")

    async def follow(self, location: str) -> tuple[int, str]:
        return await self.get(location)


@asynccontextmanager
async def serving(
    runtime: Runtime, live: Callable[[], dict[str, Any]] | None = None
) -> AsyncIterator[str]:
    """The console of `runtime` (whose config sets console.listen) until the block ends."""
    status = live or (lambda: {"channels": {}, "queue": 0, **optional_states(runtime)})
    async with web_console(runtime, AccessInForce(runtime.config), status):
        yield f"http://{runtime.config.console.listen}"


@asynccontextmanager
async def client(base: str) -> AsyncIterator[ConsoleClient]:
    """A client with its own cookie jar (loopback's IP cookies accepted, as a browser does)."""
    jar = aiohttp.CookieJar(unsafe=True)
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(cookie_jar=jar, timeout=timeout) as session:
        yield ConsoleClient(base, session)
