"""Errors raised by the channels package.

ChannelError
├── ChannelConfigError       the platform or this install cannot serve a setting; retrying won't help
│   ├── AccessError              an access setting (a policy; `open` without `"*"`)
│   ├── TelegramConfigError      Telegram refused the token or a setting; webhooks not installed
│   ├── DiscordChannelError      Discord refused the token or the MESSAGE CONTENT intent
│   ├── SlackChannelError        Slack refused a token, or the app lacks a scope or Socket Mode
│   └── MatrixChannelError       the homeserver refused the login, or the bot cannot post
└── PairingError             a pairing request that cannot be carried out, or pairing.json unreadable

Each adapter translates its SDK's errors into these at its edge, chained with `from exc` (never
where the SDK's message could quote the token). Imports nothing.
"""

from __future__ import annotations


class ChannelError(Exception):
    """Base of the channels package's errors."""


class ChannelConfigError(ChannelError):
    """The platform refuses this configuration (bad token, missing intent); retrying won't help."""


class AccessError(ChannelConfigError, ValueError):
    """An access setting the channel cannot serve (an unknown policy, `open` without `"*"`)."""


class TelegramConfigError(ChannelConfigError, ValueError):
    """A setting Telegram or this install cannot serve: a refused token, a bad value, no webhooks."""


class DiscordChannelError(ChannelConfigError):
    """Discord refuses to serve this bot (bad token, intent not enabled); retrying will not help."""


class SlackChannelError(ChannelConfigError):
    """Slack refuses to serve this app (a bad token, a missing scope, Socket Mode off)."""


class MatrixChannelError(ChannelConfigError):
    """The homeserver refuses this bot (bad token or password, another user's token)."""


class PairingError(ChannelError):
    """A pairing request that cannot be carried out; the message is for the person who asked."""
