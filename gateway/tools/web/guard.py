"""The guard in front of `web_fetch`: which URLs may be opened, and the resolver that pins a
connection to the address that was checked.

A fetch tool in a chat gateway is a door into the owner's network: every link a group member
pastes is an instruction to open it. So every host is resolved here, before connecting; every
address it resolves to must be a public one (loopback, private, link-local, carrier-grade NAT,
multicast, reserved and unspecified ranges are refused, IPv4 and IPv6, IPv4 inside IPv6 too); and
the connection is made to exactly those addresses (`PinnedResolver`), so a DNS answer that changes
between the check and the connect (rebinding) changes nothing. Hosts written as numbers in any
form `inet_aton` reads (`2130706433`, `0x7f.1`, `0177.0.0.1`) are the addresses they spell.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

log = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

RESOLVE_TIMEOUT = 10.0  # seconds a name may take to resolve
# Every part decimal, octal (leading 0) or hex (0x): what inet_aton reads as an IPv4 address.
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?$", re.I)
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class RefusedError(Exception):
    """The guard refused a URL; the message names the rule, for the model and the log."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"refused ({rule}): {detail}")
        self.rule = rule


class Resolver(Protocol):
    """Names to addresses. The system's by default; a test passes one that maps names."""

    async def addresses(self, host: str) -> list[Address]: ...


class SystemResolver:
    """The system's resolver (getaddrinfo, in asyncio's thread pool)."""

    async def addresses(self, host: str) -> list[Address]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


@dataclass(frozen=True)
class Target:
    """A URL the guard let through: its host and port, and the addresses to connect to."""

    url: URL
    host: str
    port: int
    addresses: tuple[Address, ...]


def address_rule(address: Address) -> str | None:
    """The rule that refuses `address`, or None when it is a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return address_rule(embedded)
    if address.is_unspecified:
        return "unspecified address"
    if address.is_loopback:
        return "loopback address"
    if address.is_link_local:
        return "link-local address"
    if address.is_multicast:
        return "multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "carrier-grade NAT address"
    if address.is_reserved:  # before private: Python counts 240.0.0.0/4 as both
        return "reserved address"
    if address.is_private:
        return "private address"
    if not address.is_global:  # documentation, benchmarking and other special ranges
        return "reserved address"
    return None


def literal_address(host: str) -> Address | None:
    """The address a host written as one spells (`[::1]`, `127.0.0.1`, `2130706433`, `0x7f.1`)."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare.split("%")[0])
    except ValueError:
        pass
    if _NUMERIC_HOST.match(bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare.rstrip(".")))
        except OSError:
            raise RefusedError("malformed address", f"{host!r} is not a valid address") from None
    return None


class WebGuard:
    """Checks a URL against the rules; `own` are memgate's listening (host, port) pairs."""

    def __init__(
        self,
        ports: Iterable[int],
        allow_private: Iterable[str],
        own: Iterable[tuple[str, int]],
        resolver: Resolver,
    ) -> None:
        self.ports = frozenset(ports)
        self.allow_private = frozenset(entry.lower() for entry in allow_private)
        self.own = tuple(own)
        self.resolver = resolver

    async def check(self, raw: str) -> Target:
        """The target `raw` names, resolved, if every rule lets it through; else RefusedError."""
        try:
            url = URL(raw)
        except (ValueError, TypeError):
            raise RefusedError("malformed URL", repr(raw[:200])) from None
        if url.scheme not in ("http", "https"):
            raise RefusedError(
                "scheme", f"only http and https URLs are fetched, not {url.scheme!r}"
            )
        host = (url.host or "").lower()
        if not host or url.port is None:
            raise RefusedError("malformed URL", f"{raw[:200]!r} names no host")
        port = url.port
        excepted = f"{_bare(host)}:{port}" in self.allow_private or (
            f"[{_bare(host)}]:{port}" in self.allow_private
        )
        if port not in self.ports and not excepted:
            allowed = ", ".join(str(p) for p in sorted(self.ports))
            raise RefusedError("port", f"port {port} is not one web_fetch may use ({allowed})")
        addresses = await self._addresses(host, excepted)
        for address in addresses:
            if self._own(address, port):
                raise RefusedError("memgate's own port", f"{host}:{port} is memgate itself")
            rule = address_rule(address)
            if rule is not None and not excepted:
                shown = host if _bare(host) == str(address) else f"{host} ({address})"
                raise RefusedError(rule, f"{shown} is not on the public internet")
        return Target(url, host, port, tuple(addresses))

    async def _addresses(self, host: str, excepted: bool) -> list[Address]:
        literal = literal_address(host)
        if literal is not None:
            return [literal]
        name = host.rstrip(".")
        if (name == "localhost" or name.endswith(".localhost")) and not excepted:
            raise RefusedError("loopback address", f"{host} is this machine")
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT):
                found = await self.resolver.addresses(name)
        except (OSError, TimeoutError) as exc:
            raise RefusedError("unresolvable host", f"{host} could not be resolved") from exc
        if not found:
            raise RefusedError("unresolvable host", f"{host} has no address")
        return found

    def _own(self, address: Address, port: int) -> bool:
        """Whether (address, port) may be one memgate listens on."""
        for host, own_port in self.own:
            if port != own_port:
                continue
            listen = literal_address(host) if host not in ("localhost", "") else None
            # Bound to all addresses, or to a name: any address of this machine may reach it.
            if listen is None or listen.is_unspecified or address == listen:
                return True
            if address_rule(address) is not None:  # loopback or a LAN address of this host
                return True
        return False


class PinnedResolver(AbstractResolver):
    """aiohttp's resolver for one fetch: answers only the names the guard checked, with the
    addresses it checked; any other name fails. No second lookup is ever made."""

    def __init__(self) -> None:
        self._pinned: dict[str, tuple[Address, ...]] = {}

    def pin(self, target: Target) -> None:
        self._pinned[target.host.strip("[]")] = target.addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = self._pinned.get(host.lower().strip("[]"))
        if addresses is None:
            raise OSError(f"{host} was not checked by the web guard")
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


def _bare(host: str) -> str:
    return host.strip("[]")


def log_refusal(error: RefusedError, url: str) -> None:
    """The one log line a refusal makes."""
    log.warning("web_fetch refused rule=%s url=%s", error.rule, url[:200])
