"""The `channels.slack` section: a Slack app in Socket Mode (a bot token and an app-level token)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from gateway.config.chat import ChatChannelConfig
from gateway.config.fields import http_url


class SlackConfig(ChatChannelConfig):
    # Member ids only (U…): a Slack display name can be changed by its owner to anyone's.
    doc_terms: ClassVar[dict[str, str]] = {
        "token_variable": "${SLACK_BOT_TOKEN}, the xoxb- Bot User OAuth Token",
        "senders": "member ids (U…)",
    }

    app_token: str = ""
    """The app-level token (xapp-, with connections:write) Socket Mode connects with; keep it in the env file, e.g. ${SLACK_APP_TOKEN}."""
    api_base: str = "https://slack.com/api/"
    """Slack Web API URL; change only for a proxy."""

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value)
