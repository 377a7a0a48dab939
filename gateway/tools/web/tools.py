"""The web tools as `tools.web` configures them: which scopes are offered `web_fetch` and
`web_search`, the guard's view of memgate's own listening ports, and `memgate doctor`'s probes
(`memgate status`'s line is gateway/config/web.py's: it needs no network library)."""

from __future__ import annotations

import logging

from gateway.config.fields import parse_listen
from gateway.config.models import Config
from gateway.tools.registry import Tool, ToolError
from gateway.tools.web.extract import PdfText
from gateway.tools.web.fetch import FetchTool, WebFetcher
from gateway.tools.web.guard import RefusedError, Resolver, SystemResolver, WebGuard
from gateway.tools.web.search import SearchTool, search

log = logging.getLogger(__name__)

PROBE_URL = "https://example.com/"  # doctor's page: tiny, stable, meant for examples
PROBE_QUERY = "memgate"


def own_endpoints(config: Config) -> list[tuple[str, int]]:
    """The (host, port) pairs memgate itself listens on: never fetched, whatever is allowed."""
    listens = [config.health.listen, config.console.listen]
    telegram = config.channels.telegram
    if telegram.enabled and telegram.webhook_url:
        listens.append(telegram.webhook_listen)
    return [parse_listen(listen) for listen in listens if listen]


def guard_of(config: Config, resolver: Resolver | None = None) -> WebGuard:
    settings = config.tools.web
    return WebGuard(
        settings.ports, settings.allow_private, own_endpoints(config), resolver or SystemResolver()
    )


def web_tools(
    config: Config, pdf_text: PdfText, resolver: Resolver | None = None
) -> dict[str, list[Tool]]:
    """Each scope name's web tools: web_fetch when on, web_search when a provider is set."""
    settings = config.tools.web
    tools: list[Tool] = []
    if settings.fetch:
        tools.append(FetchTool(settings, guard_of(config, resolver), pdf_text).tool())
    if settings.search.provider is not None:
        tools.append(SearchTool(settings.search).tool())
    return {scope: list(tools) for scope in settings.scopes} if tools else {}


def configured(config: Config) -> bool:
    """Whether the config file sets up the web tools (doctor then checks them live)."""
    return "web" in config.tools.model_fields_set or config.tools.web.search.provider is not None


async def probe_search(config: Config) -> tuple[bool, str]:
    """One query to the search provider: how many results came back, or why none did."""
    settings = config.tools.web.search
    try:
        results = await search(settings, PROBE_QUERY, 1)
    except ToolError as exc:
        return False, str(exc)
    return True, f"{settings.provider} answered a query ({len(results)} result(s))"


async def probe_fetch(config: Config, url: str = PROBE_URL) -> tuple[bool, str]:
    """Whether web_fetch can reach out: `url` fetched through the guard, as the tool would."""
    settings = config.tools.web
    fetcher = WebFetcher(guard_of(config), min(settings.timeout, 10.0), 64_000)
    try:
        page = await fetcher.get(url)
    except (RefusedError, ToolError) as exc:
        return False, f"fetch cannot reach out: {exc}"
    return True, f"fetch reaches out ({page.url} read)"
