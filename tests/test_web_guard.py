"""web_fetch's guard: addresses inside the owner's network are refused in every spelling, through
redirects and through a name that resolves there; memgate's own port even when allowed."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path

import pytest

from gateway.tools.web.guard import Address, address_rule
from tests.fakes.web import ARTICLE_TEXT, FakeSite, MappedResolver, start_fake_site
from tests.web_helpers import call, web_registry

pytestmark = pytest.mark.timeout(60)

# Each with the rule its refusal names. `{port}` is the live fake site's: a guard that let one
# through would read the article.
REFUSED = [
    ("http://127.0.0.1:{port}/article", "loopback address"),
    ("http://localhost:{port}/article", "loopback address"),
    ("http://[::1]:{port}/article", "loopback address"),
    ("http://[::ffff:127.0.0.1]:{port}/article", "loopback address"),
    ("http://2130706433:{port}/article", "loopback address"),
    ("http://0x7f.1:{port}/article", "loopback address"),
    ("http://public-news.example:{port}/article", "loopback address"),
    ("http://169.254.169.254/latest/meta-data/", "link-local address"),
    ("http://10.0.0.1/", "private address"),
    ("http://0.0.0.0:{port}/article", "unspecified address"),
]
# Name -> address, as an attacker's DNS would answer.
RESOLVER = MappedResolver({"public-news.example": "127.0.0.1"})


@pytest.mark.parametrize(("url", "rule"), REFUSED)
async def test_inside_addresses_are_refused_without_an_exception(
    tmp_path: Path,
    fake_site: FakeSite,
    caplog: pytest.LogCaptureFixture,
    url: str,
    rule: str,
) -> None:
    """Each is a result naming the rule and one log line; the site is never reached."""
    # The site's port is allowed, so only the address rules stand between the URL and the page.
    tools = web_registry(tmp_path, {"ports": [80, 443, fake_site.port]}, RESOLVER)
    with caplog.at_level(logging.INFO):
        result = await call(tools, "web_fetch", url=url.format(port=fake_site.port))
    assert result.startswith("Error: ") and f"refused ({rule})" in result
    assert ARTICLE_TEXT not in result and fake_site.paths == []
    lines = [r.getMessage() for r in caplog.records if "web_fetch refused" in r.getMessage()]
    assert len(lines) == 1 and f"rule={rule}" in lines[0]


@pytest.mark.parametrize(("url", "rule"), REFUSED)
async def test_an_allowed_page_redirecting_inside_is_refused(
    tmp_path: Path, fake_site: FakeSite, url: str, rule: str
) -> None:
    """The allowed site's redirect to each address is checked again and refused."""
    web = {"ports": [80, 443, fake_site.port], "allow_private": [f"127.0.0.1:{fake_site.port}"]}
    tools = web_registry(tmp_path, web, RESOLVER)
    target = url.format(port=fake_site.port)
    if target.startswith("http://127.0.0.1:"):
        # The allowed entry itself: it is let through, redirect or not.
        result = await call(tools, "web_fetch", url=f"{fake_site.url}/redirect?to={target}")
        assert ARTICLE_TEXT in result
        return
    result = await call(tools, "web_fetch", url=f"{fake_site.url}/redirect?to={target}")
    assert result.startswith("Error: ") and f"refused ({rule})" in result
    assert [p.split("?")[0] for p in fake_site.paths] == ["/redirect"]


async def test_a_port_not_listed_is_refused(tmp_path: Path, fake_site: FakeSite) -> None:
    """Only ports 80 and 443 unless configured: a public-looking name on another port is refused."""
    resolver = MappedResolver({"news.example": "93.184.215.14"})
    tools = web_registry(tmp_path, {}, resolver)
    result = await call(tools, "web_fetch", url="http://news.example:8080/")
    assert "refused (port)" in result


async def test_redirects_stop_after_five(tmp_path: Path, fake_site: FakeSite) -> None:
    """A chain of six redirects ends in a clear result, not a loop."""
    tools = web_registry(tmp_path, {"allow_private": [f"127.0.0.1:{fake_site.port}"]})
    url = f"{fake_site.url}/article"
    for _ in range(6):
        url = f"{fake_site.url}/redirect?to={url}"
    result = await call(tools, "web_fetch", url=url)
    assert result.startswith("Error: ") and "redirects more than 5 times" in result
    assert "/article" not in fake_site.paths


async def test_the_connection_goes_to_the_address_checked(
    tmp_path: Path, fake_site: FakeSite
) -> None:
    """A name is resolved once, by the guard's resolver, and the page read from that address
    (no name of the test exists in the system's DNS)."""
    asked: list[str] = []

    class Counting(MappedResolver):
        async def addresses(self, host: str) -> list[Address]:
            asked.append(host)
            return await super().addresses(host)

    resolver = Counting({"lan-wiki.example": "127.0.0.1"})
    tools = web_registry(
        tmp_path, {"allow_private": [f"lan-wiki.example:{fake_site.port}"]}, resolver
    )
    result = await call(tools, "web_fetch", url=f"http://lan-wiki.example:{fake_site.port}/article")
    assert ARTICLE_TEXT in result and asked == ["lan-wiki.example"]


@pytest.mark.parametrize("section", ["health", "console"])
async def test_memgates_own_port_is_refused_even_when_allowed(
    tmp_path: Path, fake_site: FakeSite, section: str
) -> None:
    """health.listen's (and console.listen's) port stays refused though allow_private lists it;
    the site beside it is read."""
    health, runner = await start_fake_site()  # listening where memgate's own endpoint is
    try:
        allow = [f"127.0.0.1:{fake_site.port}", f"127.0.0.1:{health.port}"]
        own = {section: {"listen": f"127.0.0.1:{health.port}"}}
        tools = web_registry(tmp_path, {"allow_private": allow}, None, **own)
        assert ARTICLE_TEXT in await call(tools, "web_fetch", url=f"{fake_site.url}/article")
        result = await call(tools, "web_fetch", url=f"{health.url}/article")
        assert "refused (memgate's own port)" in result and health.paths == []
        alias = await call(tools, "web_fetch", url=f"http://[::ffff:127.0.0.1]:{health.port}/")
        assert "refused" in alias
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("100.64.0.1", "carrier-grade NAT address"),
        ("224.0.0.1", "multicast address"),
        ("240.0.0.1", "reserved address"),
        ("192.168.1.1", "private address"),
        ("fe80::1", "link-local address"),
        ("fc00::1", "private address"),
        ("ff02::1", "multicast address"),
        ("::", "unspecified address"),
        ("64:ff9b::7f00:1", "loopback address"),
        ("2002:a00:1::", "private address"),
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
    ],
)
def test_address_rules(address: str, rule: str | None) -> None:
    """Every range the guard refuses, IPv6 carrying IPv4 included; public addresses pass."""
    assert address_rule(ipaddress.ip_address(address)) == rule


async def test_an_allowed_localhost_entry_is_read(tmp_path: Path, fake_site: FakeSite) -> None:
    """allow_private `localhost:<port>` lets that one name and port through, and nothing else."""
    resolver = MappedResolver({"localhost": "127.0.0.1"})
    tools = web_registry(tmp_path, {"allow_private": [f"localhost:{fake_site.port}"]}, resolver)
    page = await call(tools, "web_fetch", url=f"http://localhost:{fake_site.port}/article")
    assert ARTICLE_TEXT in page
    other = await call(tools, "web_fetch", url="http://localhost/")
    assert "refused (loopback address)" in other
