"""The `tools.web` section: `web_fetch` and its guard against reaching inside, and `web_search`'s
provider."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from gateway.config.fields import SECTION, host_port, http_url


class _Section(BaseModel):
    # The string under each field is its meaning in docs/configuration.md (gateway/config/reference.py
    # reads it from this source).
    model_config = SECTION


# Where each provider answers when `base_url` is not set (SearXNG has no public one: it is yours).
PROVIDER_URLS = {
    "brave": "https://api.search.brave.com/res/v1",
    "tavily": "https://api.tavily.com",
}


class WebSearchConfig(_Section):
    """`web_search`: the provider its queries go to; without one the tool is not offered."""

    provider: Literal["brave", "searxng", "tavily"] | None = None
    """brave (Brave Search API, needs api_key), searxng (your own instance's JSON API, needs base_url), tavily (Tavily API, needs api_key); null: no web_search."""
    api_key: str = ""
    """The provider's key (brave, tavily); use ${VAR} to keep it out of the file."""
    base_url: str | None = None
    """The provider's address; needed for searxng (e.g. http://127.0.0.1:8888), optional for the others (a proxy or a test server)."""
    count: int = Field(5, ge=1, le=20)
    """Results per query, unless the model asks for fewer."""
    timeout: float = Field(15, gt=0, le=120)
    """Seconds a query may take; past it the model is told the provider did not answer."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value).rstrip("/")

    @model_validator(mode="after")
    def _complete(self) -> WebSearchConfig:
        if self.provider == "searxng" and self.base_url is None:
            raise ValueError("provider searxng needs base_url, your instance's address")
        if self.provider in ("brave", "tavily") and not self.api_key:
            raise ValueError(f"provider {self.provider} needs api_key")
        return self

    def endpoint(self) -> str:
        """The provider's base URL: `base_url`, else its public one."""
        if self.base_url is not None:
            return self.base_url
        return PROVIDER_URLS[self.provider or ""]


class WebConfig(_Section):
    """`web_fetch` and `web_search`: pages read from the internet, never from inside your network."""

    fetch: bool = True
    """true: offer `web_fetch` (the guard refuses private, loopback and link-local addresses and memgate's own ports)."""
    scopes: list[Literal["private", "group"]] = ["private"]
    """Chats offered the web tools: private (the owner's DMs and the terminal) and/or group (groups and guests)."""
    timeout: float = Field(20, gt=0, le=300)
    """Seconds one fetch may take, redirects included; a page still arriving then is cut there."""
    max_bytes: int = Field(5_000_000, ge=10_000, le=100_000_000)
    """Bytes of one response read at most; a larger one is cut there, with a note."""
    max_chars: int = Field(12_000, ge=500, le=16_000)
    """Characters of a page's text given to the model at most (the model may ask for fewer)."""
    cache_minutes: float = Field(10, ge=0, le=1440)
    """Minutes a fetched page is remembered, so asking for it again costs nothing; 0: no cache."""
    ports: list[int] = [80, 443]
    """Ports a URL may name; others are refused (allow_private entries aside)."""
    allow_private: list[str] = []
    """host:port exceptions the guard lets through although their address is private or loopback (a service on your LAN you want read); memgate's own listening ports stay refused."""
    search: WebSearchConfig = WebSearchConfig()
    """The `web_search` provider."""

    @field_validator("ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        for port in value:
            if not 0 < port < 65536:
                raise ValueError(f"port {port} is outside 1..65535")
        return value

    @field_validator("allow_private")
    @classmethod
    def _host_ports(cls, value: list[str]) -> list[str]:
        return [host_port(entry).lower() for entry in value]


def describe_web(settings: WebConfig) -> str:
    """One line for `memgate status`: what is offered, and to whom."""
    offered = []
    if settings.fetch:
        offered.append("fetch")
    if settings.search.provider is not None:
        offered.append(f"search ({settings.search.provider})")
    if not offered:
        return "off (tools.web.fetch is false, no tools.web.search.provider)"
    extra = (
        f", {len(settings.allow_private)} private exception(s)" if settings.allow_private else ""
    )
    return f"{' and '.join(offered)} in {', '.join(settings.scopes)} chats{extra}"
