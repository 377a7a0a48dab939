"""The console's web server: who gets in, and the headers every answer carries.

Every request passes one guard, in this order: a Host header that is not one of the console's own
names is refused (421: a DNS-rebinding page cannot borrow the browser's loopback); `/login` takes a
one-time ticket and sets the session cookie; anything else without a valid session cookie is 401;
a POST without its session's CSRF token (or from another origin) is 403. Every answer carries a
strict Content-Security-Policy (nothing but this server's own stylesheet) and is never cached.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from aiohttp import web

from gateway.config.fields import parse_listen
from gateway.console import access, assets, chats, history, jobs, memory, status
from gateway.console.keys import SESSION_LIFE, USED_FILE, Tickets, console_secret
from gateway.console.sources import Sources
from gateway.console.view import Console
from gateway.errors import MemgateError

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make the browser send Origin: null
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def own_hosts(listen: str, extra: list[str]) -> set[str]:
    """The Host headers the console answers to: its listen address, loopback's names for its
    port when it listens on loopback or everywhere, and the configured extra names."""
    host, port = parse_listen(listen)
    names = {f"[{host}]:{port}" if ":" in host else f"{host}:{port}"}
    try:
        address = ipaddress.ip_address(host)
        local = address.is_loopback or address.is_unspecified
    except ValueError:
        local = host == "localhost"
    if local:
        names.update(f"{name}:{port}" for name in LOOPBACK_NAMES)
    return {name.lower() for name in names | set(extra)}


def build_app(sources: Sources, secret: bytes) -> web.Application:
    listen = sources.config.console.listen
    assert listen is not None
    hosts = own_hosts(listen, sources.config.console.hosts)
    port = parse_listen(listen)[1]
    tickets = Tickets(secret, sources.config.state_dir / USED_FILE)
    console = Console(sources, tickets, f"memgate_console_{port}")

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await _admit(request, handler)
        except web.HTTPException as exc:  # a redirect after a change, or a refusal
            exc.headers.update(HEADERS)
            raise
        response.headers.update(HEADERS)
        return response

    async def _admit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (request.host or "").lower() not in hosts:
            log.warning("console refused a request for host=%s", request.host[:80])
            return _refusal(421, "This console answers to its own address only.")
        if request.path == "/login":
            return _login(request)
        cookie = request.cookies.get(console.cookie_name, "")
        if not console.tickets.valid_session(cookie):
            return _refusal(401, "Log in with the URL `memgate console` prints.")
        if request.method == "POST":
            origin = request.headers.get("Origin")
            data = await request.post()
            token = str(data.get("csrf", ""))
            if (origin and origin.split("//", 1)[-1].lower() not in hosts) or not (
                token and console.tickets.valid_csrf(cookie, token)
            ):
                log.warning("console refused a POST without its CSRF token path=%s", request.path)
                return _refusal(403, "This form is stale or was not sent by this console.")
        elif request.method not in ("GET", "HEAD"):
            return _refusal(405, "Not allowed.")
        return await handler(request)

    def _login(request: web.Request) -> web.StreamResponse:
        if not console.tickets.take(request.query.get("ticket", "")):
            log.warning("console login refused: a wrong, used or expired ticket")
            return _refusal(401, "This login URL is wrong, used or expired: run `memgate console`.")
        response = web.HTTPSeeOther("/memory")  # the ticket leaves the address bar
        response.set_cookie(
            console.cookie_name,
            console.tickets.session_cookie(),
            max_age=int(SESSION_LIFE),
            httponly=True,
            samesite="Strict",
            path="/",
        )
        log.info("console login")
        raise response

    app = web.Application(middlewares=[guard], client_max_size=4 * 1024 * 1024)
    app.router.add_get("/", _home)
    app.router.add_get("/login", _home)  # the guard answers first
    app.router.add_get("/static/console.css", assets.stylesheet)
    for module in (memory, history, chats, jobs, access, status):
        app.router.add_routes(module.routes(console))
    return app


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/memory")


def _refusal(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=f"{status}: {text}\n", content_type="text/plain")


def console_server(sources: Sources) -> AbstractAsyncContextManager[str]:
    """Serve the console on `console.listen` for the length of the block (its URL inside)."""

    @asynccontextmanager
    async def serving() -> AsyncIterator[str]:
        listen = sources.config.console.listen
        assert listen is not None
        secret = await asyncio.to_thread(console_secret, sources.config.state_dir)
        runner = web.AppRunner(build_app(sources, secret), access_log=None)
        await runner.setup()
        host, port = parse_listen(listen)
        try:
            try:
                await web.TCPSite(runner, host, port).start()
            except OSError as exc:
                raise MemgateError(
                    f"console.listen {listen}: cannot listen there ({exc.strerror or exc})"
                ) from exc
            log.info(
                "console listening on http://%s:%d (memgate console prints a login)", host, port
            )
            yield f"http://{host}:{port}"
        finally:
            await runner.cleanup()

    return serving()
