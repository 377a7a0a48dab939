"""What every settings model is made of: the sections' model config (unknown keys refused, values
frozen) and the checks of single values (URLs, listen addresses), with their masking for display."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from pydantic import ConfigDict


def http_url(value: str) -> str:
    """An http(s) URL with a host, or a ValueError saying what is wrong."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL, e.g. http://localhost:11434/v1")
    return value


def api_url(value: str) -> str:
    """An OpenAI-API base URL: http(s), with no user:password and no query string. The SDK sends
    the key as a Bearer token and appends each path to the URL's text, so credentials or a query
    there never reach the server as meant (a query even swallows the path)."""
    http_url(value)
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "must not carry user:password (the endpoint is sent the api_key as a Bearer token: "
            "put the key in api_key)"
        )
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query string or fragment (paths are appended to it)")
    return value


def mask_url(value: str) -> str:
    """`value` with a password and the query's values masked, for display; other text as it is."""
    parts = urlsplit(value)
    if not parts.scheme or not (parts.password or parts.query):
        return value
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
    query = re.sub(r"=[^&]*", "=***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def parse_listen(value: str) -> tuple[str, int]:
    """`127.0.0.1:8765` → ("127.0.0.1", 8765), `[::1]:8765` → ("::1", 8765); a ValueError saying
    what is wrong for anything else (no host, no port, a port outside 1..65535)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("must be host:port, e.g. 127.0.0.1:8765")
    return host.strip("[]"), int(port)


def host_port(value: str) -> str:
    """`host:port` with a port in 1..65535, or a ValueError saying what is wrong."""
    parse_listen(value)
    return value


def ws_url(value: str) -> str:
    """A ws(s) URL with a host, or a ValueError saying what is wrong."""
    parts = urlsplit(value)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError("must be a ws:// or wss:// URL, e.g. wss://gateway.discord.gg")
    return value


# Every section refuses unknown keys and is frozen. Each settings module declares its own base
# with this config (a local base is what lets linters see the models as pydantic's).
SECTION = ConfigDict(extra="forbid", frozen=True)
