"""The `web_fetch` tool: one URL read through the guard, its readable text for the model.

Redirects are followed here, not by aiohttp, so each hop is checked again (at most
MAX_REDIRECTS); every connection goes to the address the guard checked (guard.py's
PinnedResolver). A response is read up to `tools.web.max_bytes` and for `tools.web.timeout`
seconds in all: past either, what arrived is used, with a note saying it was cut. Recent pages
are kept for `cache_minutes`, so a turn's retries cost nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from gateway.config.web import WebConfig
from gateway.tools.registry import Tool, ToolError
from gateway.tools.web.extract import Extract, ExtractError, PdfText, extract
from gateway.tools.web.guard import PinnedResolver, RefusedError, WebGuard, log_refusal
from gateway.tools.web.untrusted import wrap_untrusted

log = logging.getLogger(__name__)

NAME = "web_fetch"
MAX_REDIRECTS = 5
CACHE_ENTRIES = 64
CHUNK = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HEADERS = {
    "User-Agent": "memgate (web_fetch; a personal assistant reading a page for its owner)",
    "Accept": "text/html,application/xhtml+xml,application/json,application/pdf,text/*;q=0.9,"
    "*/*;q=0.5",
}
_STATUS_TEXT = {
    401: "it needs a login (HTTP 401)",
    403: "access is forbidden (HTTP 403)",
    404: "there is no such page (HTTP 404)",
    429: "the site is rate-limiting requests (HTTP 429); try again later",
}


@dataclass(frozen=True)
class Page:
    """A response as read: where it ended up, what it is, and why it is cut (if it is)."""

    url: str
    content_type: str
    charset: str | None
    body: bytes
    cut: str | None = None


class WebFetcher:
    """Reads one URL through the guard, following redirects hop by hop."""

    def __init__(self, guard: WebGuard, timeout: float, max_bytes: int) -> None:
        self.guard = guard
        self.timeout = timeout
        self.max_bytes = max_bytes

    async def get(self, raw: str) -> Page:
        """The response `raw` leads to; RefusedError when a hop breaks a rule, ToolError when
        the site cannot be read."""
        resolver = PinnedResolver()
        # No pooling and no DNS cache: every connection asks the resolver, which knows only
        # what the guard checked for this fetch.
        connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, force_close=True)
        chunks: list[bytes] = []
        head: dict[str, Any] = {}
        url = raw
        async with aiohttp.ClientSession(connector=connector, headers=_HEADERS) as session:
            try:
                async with asyncio.timeout(self.timeout):
                    for _ in range(MAX_REDIRECTS + 1):
                        target = await self.guard.check(url)
                        resolver.pin(target)
                        async with session.get(target.url, allow_redirects=False) as response:
                            location = response.headers.get("Location")
                            if response.status in _REDIRECTS and location:
                                try:
                                    url = str(target.url.join(URL(location)))
                                except ValueError:
                                    raise ToolError(f"{url} redirects to a malformed URL") from None
                                continue
                            _check_status(response, target.url)
                            head.update(
                                url=str(target.url),
                                content_type=response.content_type.lower(),
                                charset=response.charset,
                            )
                            return await self._read(response, chunks, head)
                    raise ToolError(f"{raw} redirects more than {MAX_REDIRECTS} times")
            except TimeoutError:
                if not head:
                    raise ToolError(
                        f"{url} did not answer within {self.timeout:g} s (tools.web.timeout)"
                    ) from None
                cut = f"the page was still arriving after {self.timeout:g} s; cut there"
                return Page(body=b"".join(chunks), cut=cut, **head)
            except aiohttp.ClientError as exc:
                raise ToolError(f"{url} could not be read ({_describe(exc)})") from exc

    async def _read(
        self, response: aiohttp.ClientResponse, chunks: list[bytes], head: dict[str, Any]
    ) -> Page:
        size = 0
        async for chunk in response.content.iter_chunked(CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_bytes:
                cut = f"the page is larger than {self.max_bytes:,} bytes; cut there"
                return Page(body=b"".join(chunks)[: self.max_bytes], cut=cut, **head)
        return Page(body=b"".join(chunks), **head)


def _check_status(response: aiohttp.ClientResponse, url: URL) -> None:
    if response.status < 400:
        return
    reason = _STATUS_TEXT.get(response.status)
    if reason is None:
        side = "the site failed" if response.status >= 500 else "the site refused the request"
        reason = f"{side} (HTTP {response.status} {response.reason or ''})".replace(" )", ")")
    raise ToolError(f"{url} was not fetched: {reason}")


def _describe(exc: aiohttp.ClientError) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    return str(exc) or type(exc).__name__


@dataclass(frozen=True)
class _Fetched:
    page: Page
    extract: Extract


class FetchTool:
    """`web_fetch(url, max_chars?)`: a page's text, wrapped as untrusted, with a short cache."""

    def __init__(self, settings: WebConfig, guard: WebGuard, pdf_text: PdfText) -> None:
        self.settings = settings
        self.fetcher = WebFetcher(guard, settings.timeout, settings.max_bytes)
        self.pdf_text = pdf_text
        self._cache: OrderedDict[str, tuple[float, _Fetched]] = OrderedDict()

    def tool(self) -> Tool:
        return Tool(
            NAME,
            "Read a web page (http/https): its main text, title, final URL and type (HTML, text, "
            "JSON or PDF). Local and private addresses are refused.",
            {
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "the http(s) URL"},
                    "max_chars": {
                        "type": "integer",
                        "description": f"at most {self.settings.max_chars}",
                    },
                },
                "required": ["url"],
            },
            self.run,
        )

    async def run(self, arguments: dict[str, Any]) -> str:
        url = arguments.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ToolError("url must be a non-empty string")
        url = url.strip()
        limit = self.settings.max_chars
        asked = arguments.get("max_chars")
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
            limit = min(asked, limit)
        try:
            fetched = await self._fetched(url)
        except RefusedError as exc:
            log_refusal(exc, url)
            return f"Error: {url} was {exc}."
        return render(fetched.page, fetched.extract, limit)

    async def _fetched(self, url: str) -> _Fetched:
        now = time.monotonic()
        cached = self._cache.get(url)
        if cached is not None and cached[0] > now:
            return cached[1]
        started = time.monotonic()
        page = await self.fetcher.get(url)
        try:
            text = await asyncio.to_thread(
                extract,
                page.body,
                page.content_type,
                page.charset,
                self.pdf_text,
                self.settings.max_chars,
            )
        except ExtractError as exc:
            raise ToolError(f"{page.url} has no readable text: {exc}") from exc
        fetched = _Fetched(page, text)
        log.info(
            "web_fetch read bytes=%d type=%s seconds=%.1f cut=%s",
            len(page.body),
            page.content_type or "-",
            time.monotonic() - started,
            "yes" if page.cut else "no",
        )
        ttl = self.settings.cache_minutes * 60
        if ttl > 0:
            self._cache[url] = (now + ttl, fetched)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return fetched


def render(page: Page, text: Extract, limit: int) -> str:
    """The result the model reads: what the page is, then its text wrapped as untrusted."""
    lines = []
    if text.title:
        lines.append(f"Title: {' '.join(text.title.split())[:300]}")
    lines.append(f"URL: {page.url}")
    lines.append(f"Content-Type: {page.content_type or 'unknown'}")
    body = text.text
    if page.cut:
        lines.append(f"Note: {page.cut}.")
    if len(body) > limit:
        lines.append(f"Note: text cut at {limit:,} of {len(body):,} characters.")
        body = body[:limit] + "\n[... cut]"
    if not body.strip():
        body = "(no text)"
    return "\n".join(lines) + "\n\n" + wrap_untrusted(body)
