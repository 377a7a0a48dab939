"""The `channels.matrix` section: the homeserver, the bot's account and how it logs in."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator, model_validator

from gateway.config.chat import ChatChannelConfig
from gateway.config.fields import http_url

_USER_ID = re.compile(r"^@[^:\s]+:\S+$")


class MatrixConfig(ChatChannelConfig):
    # Full user ids only: a display name can be taken by anyone in a room.
    doc_terms: ClassVar[dict[str, str]] = {
        "token_variable": "${MATRIX_ACCESS_TOKEN}",
        "senders": "Matrix user ids (@name:server)",
    }

    homeserver: str = "https://matrix.org"
    """The bot account's homeserver URL (client-server API)."""
    user_id: str = ""
    """The bot's full user id, e.g. @memgate:example.org."""
    password: str = ""
    """The bot account's password, used when token is empty: memgate logs in once and keeps the device (e.g. ${MATRIX_PASSWORD})."""
    device_name: str = "memgate"
    """The name of the device memgate's login creates."""
    sync_timeout: float = Field(30, ge=1, le=300)
    """Seconds a /sync waits on the homeserver for new events."""

    @field_validator("homeserver")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("user_id")
    @classmethod
    def _user_id(cls, value: str) -> str:
        value = value.strip()
        if value and not _USER_ID.match(value):
            raise ValueError("must be a full Matrix user id, e.g. @memgate:example.org")
        return value

    @model_validator(mode="after")
    def _login(self) -> MatrixConfig:
        if self.enabled and not self.user_id:
            raise ValueError("user_id: the bot's Matrix user id is needed (@name:server)")
        return self
