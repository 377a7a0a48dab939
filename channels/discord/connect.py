"""Reaching Discord: discord.py aimed at the configured endpoints, its client with the events
forwarded, the intents memgate needs, and the doctor's probe.

Part of the Discord adapter, so it may import `discord`; of ours only `channels.errors`.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Protocol

import aiohttp  # discord.py's own transport; imported for its exception types only
import yarl

from channels.errors import DiscordChannelError as DiscordChannelError  # importable from here too

with warnings.catch_warnings():
    # discord.py imports the stdlib `audioop` for voice, which memgate never uses; Python 3.11 and
    # 3.12 warn that it is deprecated, and the test suite turns warnings into errors.
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord as discord  # the adapter's other modules import the SDK from here
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

# memgate has no voice support to miss; without this every start logs two warnings about it.
discord.VoiceClient.warn_nacl = False
discord.VoiceClient.warn_dave = False

_DISCORD_GATEWAY = DiscordWebSocket.DEFAULT_GATEWAY  # captured before anyone points it elsewhere
# What a failed request, download or send raises: the SDK's errors and its transport's.
NETWORK_ERRORS = (discord.DiscordException, OSError, aiohttp.ClientError, TimeoutError)


class GatewayEvents(Protocol):
    """What the client tells the channel: connection changes and each new message."""

    def on_connected(self, connected: bool, event: str) -> None: ...

    def on_message(self, message: discord.Message) -> None: ...


class Client(discord.Client):
    """discord.py's client with its events forwarded to the channel."""

    def __init__(self, events: GatewayEvents, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self._events = events

    async def on_ready(self) -> None:
        self._events.on_connected(True, "ready")

    async def on_resumed(self) -> None:
        self._events.on_connected(True, "resumed")

    async def on_disconnect(self) -> None:
        self._events.on_connected(False, "disconnected")

    async def on_message(self, message: discord.Message) -> None:
        self._events.on_message(message)


def point_library_at(api_base: str, gateway_url: str | None) -> None:
    """Aim discord.py's REST calls and gateway connection at the configured endpoints.

    Both are class attributes in discord.py, so this is process-wide: every client in the process
    uses the values set last. memgate runs one Discord client per process, and tests run them one
    after another, each setting both values before it logs in.
    """
    Route.BASE = api_base
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url) if gateway_url else _DISCORD_GATEWAY


def intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True  # the guild, channel and thread cache
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True  # privileged: switched on per bot in the Developer Portal
    return intents


_PROBE_TIMEOUT = 15.0  # seconds for `memgate doctor`'s whole check


async def probe_discord(*, token: str, api_base: str) -> str:
    """`memgate doctor`: log in over REST and read the application's intent flags, in one line.

    Raises DiscordChannelError when the token is refused or MESSAGE CONTENT is not enabled.
    """
    point_library_at(api_base, None)
    client = discord.Client(intents=intents())
    try:
        async with asyncio.timeout(_PROBE_TIMEOUT):
            await client.login(token)
            info = await client.application_info()
    except discord.LoginFailure:
        raise DiscordChannelError(
            "Discord rejected the bot token (channels.discord.token)"
        ) from None
    except (OSError, aiohttp.ClientError, TimeoutError, discord.HTTPException) as exc:
        raise DiscordChannelError(f"Discord API not reachable ({type(exc).__name__})") from None
    finally:
        await client.close()
    flags = info.flags
    if not (flags.gateway_message_content or flags.gateway_message_content_limited):
        raise DiscordChannelError(
            "the MESSAGE CONTENT intent is off: enable it in the Developer Portal "
            "(Bot → Privileged Gateway Intents)"
        )
    user = client.user
    return f"logged in as {user.name if user else info.name}, MESSAGE CONTENT intent on"
