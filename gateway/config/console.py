"""The `console` section: where `memgate run` serves the local web console, and to which names."""

from __future__ import annotations

from pydantic import BaseModel, field_validator

from gateway.config.fields import SECTION, host_port


class _Section(BaseModel):
    # The string under each field is its meaning in docs/configuration.md (gateway/config/reference.py
    # reads it from this source; pydantic's own reading costs every start ~50 ms).
    model_config = SECTION


class ConsoleConfig(_Section):
    """The web console: memory, its versions, chats, jobs and access in a browser."""

    listen: str | None = None  # e.g. "127.0.0.1:8766"
    """host:port the console is served on (keep it on loopback; reach it over an SSH tunnel); null: no console. `memgate console` prints its login URL."""
    hosts: list[str] = []
    """Other host:port names the browser may use for it (an SSH tunnel on another local port, e.g. localhost:9000); any other Host header is refused (DNS rebinding)."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        return None if value is None else host_port(value)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [host_port(host) for host in value]
