"""Configuration: the settings models, each key checked on construction.

Loading the file (`${VAR}` expansion, error messages naming file, key and value) and writing it
are gateway/config/file.py's.
"""

from __future__ import annotations

import zoneinfo
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, field_validator

from gateway.config.chat import ChatChannelConfig as ChatChannelConfig
from gateway.config.console import ConsoleConfig
from gateway.config.fields import SECTION, api_url, host_port, http_url, parse_listen, ws_url
from gateway.config.matrix import MatrixConfig as MatrixConfig
from gateway.config.memory_updates import MemoryUpdatesConfig
from gateway.config.slack import SlackConfig
from gateway.config.subagents import SubagentsConfig
from gateway.config.tools import ToolsConfig


class _Section(BaseModel):
    # The string under each field is its meaning in docs/configuration.md (gateway/config/reference.py
    # reads it from this source; pydantic's own reading costs every start ~50 ms).
    model_config = SECTION


class TranscriptionConfig(_Section):
    """An OpenAI-compatible /audio/transcriptions endpoint for voice notes and audio files."""

    base_url: str | None = None
    """Its base URL, ending in /v1; empty: the chat endpoint (llm.base_url)."""
    api_key: str | None = None
    """Its API key; empty: llm.api_key."""
    model: str = "whisper-1"
    """The speech-to-text model the endpoint knows (whisper-1, gpt-4o-transcribe, a local Whisper)."""
    timeout: float = Field(120, gt=0)
    """Seconds per transcription request."""

    @field_validator("base_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        return api_url(value) if value else None


class LLMConfig(_Section):
    base_url: str = "https://api.openai.com/v1"
    """Any OpenAI-compatible endpoint, ending in /v1 (OpenAI, vLLM, Ollama, LiteLLM, llama.cpp); no user:password or ?query in it (the key goes in api_key)."""
    api_key: str = ""
    """The endpoint's API key; required for OpenAI's URL, may be empty for a local server."""
    model: str = "gpt-4o-mini"
    """The model name the endpoint knows."""
    context_window: int = Field(128_000, ge=2048)
    """The model's context size in tokens."""
    max_tokens: int = Field(4096, ge=16)
    """Tokens kept for each reply."""
    temperature: float = Field(0.7, ge=0, le=2)
    """Sampling temperature (0-2); dropped automatically for models that refuse it."""
    timeout: float = Field(60, gt=0)
    """Seconds per LLM request."""
    max_retries: int = Field(2, ge=0, le=10)
    """Retries of transient errors (rate limits, 5xx, timeouts)."""
    max_concurrency: int | Literal["auto"] = "auto"
    """Requests in flight to the endpoint at once (not agent.max_concurrency, the conversations answered at once); more wait in memgate, replies ahead of consolidation, and llm.timeout counts from when a request is sent. auto: the server's own slot count where it says (llama.cpp's /props; llama-cpp-python's server: 1), else 8."""
    # auto: offer tools, and stop for this process when the endpoint says the model has none.
    tools: Literal["auto", "on", "off"] = "auto"
    """Tool calling: auto (on, switched off for the process when the endpoint says the model has none), on, or off (plain chat; consolidation asks for JSON text)."""
    # auto: on for model names known to see images, off for the process when the endpoint refuses.
    vision: bool | Literal["auto"] = "auto"
    """Images in the current message go to the model as image parts: true, false, or auto (on for model names known to accept images, switched off for the process with one warning when the endpoint refuses them)."""
    transcription: TranscriptionConfig | None = TranscriptionConfig()
    """Speech to text for voice notes and audio files (a section with the keys below); null: audio is saved and named, not transcribed."""

    @field_validator("base_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        return api_url(value)

    @field_validator("max_concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)  # from a ${VAR}
        if value == "auto" or (type(value) is int and 1 <= value <= 256):
            return value
        raise ValueError("must be auto or a whole number of requests from 1 to 256")

    @property
    def budget(self) -> int:
        """Tokens the prompt may use: the window less the answer and a safety margin."""
        return self.context_window - self.max_tokens - 1024


class EmbeddingsConfig(_Section):
    """An OpenAI-compatible embeddings endpoint for semantic memory search."""

    base_url: str
    """An OpenAI-compatible embeddings endpoint (required when the section is set)."""
    api_key: str = ""
    """Its API key; empty for servers that need none."""
    model: str = "text-embedding-3-small"
    """Embeddings model; changing it re-embeds every entry."""
    vector_weight: float = Field(0.7, ge=0, le=1)
    """Weight of cosine similarity in a hit's score."""
    keyword_weight: float = Field(0.3, ge=0, le=1)
    """Weight of the BM25 keyword score (scaled to 0..1) in a hit's score."""
    timeout: float = Field(30, gt=0)  # seconds for one embeddings request
    """Seconds per embeddings request."""

    @field_validator("base_url")
    @classmethod
    def _api_url(cls, value: str) -> str:
        return api_url(value)


class MemoryLLMConfig(_Section):
    """A model of its own for consolidation and compaction, e.g. a bigger or cheaper one beside a
    small local chat model; each key left out is llm's."""

    base_url: str | None = None
    """Its OpenAI-compatible endpoint, ending in /v1; empty: llm.base_url."""
    api_key: str | None = None
    """Its API key; empty: llm.api_key."""
    model: str | None = None
    """Its model name; empty: llm.model."""

    @field_validator("base_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        return api_url(value) if value else None


class MemoryConfig(_Section):
    window: int = Field(100, ge=4)
    """Consolidate when this many messages are not yet consolidated."""
    consolidate_at: float = Field(0.75, gt=0, le=1)
    """... or when the prompt reaches this share of the token budget."""
    consolidate_to: float = Field(0.5, gt=0, lt=1)
    """... down to this share (below consolidate_at)."""
    workers: int = Field(2, ge=1, le=32)
    """Consolidations running at once."""
    consolidate_on_new: bool = True
    """false: /new rotates the session without consolidating it."""
    max_history_messages: int = Field(0, ge=0)
    """Cap on history messages sent to the LLM; 0: the token budget alone."""
    groups: Literal["private", "shared"] = "private"
    """private: group chats see no MEMORY.md and write only HISTORY.md; shared: they read and update MEMORY.md too."""
    guests: Literal["private", "shared"] = "private"
    """A guest's DM (let in by pairing or "*"): private gives it a group chat's scope; shared gives it the owner's whole memory, only for people you trust completely."""
    timeout: float = Field(120, gt=0)  # seconds for one consolidation call
    """Seconds per consolidation call."""
    fixed_share: float = Field(0.5, ge=0.1, le=0.9)
    """Share of the prompt budget the fixed files (bootstrap files, MEMORY.md, today's note) may take together; a file over its part is cut in the prompt, with a warning naming it."""
    max_memory_tokens: int = Field(4000, ge=256)
    """Consolidation compacts a MEMORY.md larger than this toward it."""
    embeddings: EmbeddingsConfig | None = None  # None: memory search on keywords alone
    """Semantic search (a section with the keys below); null: keyword search alone."""
    llm: MemoryLLMConfig | None = None
    """Consolidation's own model (a section with the keys below); null: the chat model (llm)."""
    updates: MemoryUpdatesConfig = MemoryUpdatesConfig()
    """What one consolidation may change of MEMORY.md."""


class MediaConfig(_Section):
    """What memgate reads of the files people send, and how much."""

    max_image_side: int = Field(1568, ge=64, le=8192)
    """Images are downscaled so their longer side is at most this many pixels before the model sees them."""
    max_document_chars: int = Field(20_000, ge=100)
    """Characters of a document's text (.txt, .md, .csv, .json, source files, .pdf) given to the model; the rest is cut with a marker."""
    max_image_bytes: int = Field(10_000_000, ge=1)
    """Images larger than this many bytes are saved but not shown to the model."""
    max_audio_bytes: int = Field(25_000_000, ge=1)
    """Audio larger than this many bytes is saved but not transcribed."""
    max_document_bytes: int = Field(20_000_000, ge=1)
    """Documents larger than this many bytes are saved but not read."""


class AgentConfig(_Section):
    max_iterations: int = Field(20, ge=1, le=200)
    """Tool calls in one turn before memgate stops the loop."""
    max_concurrency: int = Field(8, ge=1, le=256)
    """Conversations answered at the same time; their requests to the model then wait for llm.max_concurrency."""
    subagents: SubagentsConfig = SubagentsConfig()
    """Background agents started with the spawn tool (see README, "Background tasks")."""


class TelegramConfig(ChatChannelConfig):
    doc_terms: ClassVar[dict[str, str]] = {
        "token_variable": "${TELEGRAM_BOT_TOKEN}",
        "senders": "user ids or @usernames",
    }

    base_url: str = "https://api.telegram.org/bot"
    """Bot API URL; change only for a self-hosted Bot API server."""
    base_file_url: str | None = None
    """File download URL; null: base_url with /bot made /file/bot."""
    webhook_url: str | None = None
    """Public HTTPS URL Telegram posts updates to; null: long polling (no open port)."""
    webhook_listen: str = "127.0.0.1:8443"
    """host:port memgate listens on for the webhook (behind your reverse proxy)."""
    webhook_secret: str | None = None
    """Secret Telegram sends back with each update; null: a random one at every start."""

    @field_validator("base_url", "base_file_url", "webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)

    @field_validator("webhook_listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        return host_port(value)

    @property
    def webhook_address(self) -> tuple[str, int]:
        """`webhook_listen` as the (host, port) to bind."""
        return parse_listen(self.webhook_listen)


class DiscordConfig(ChatChannelConfig):
    # Ids only: a Discord username can be given up and claimed by someone else.
    doc_terms: ClassVar[dict[str, str]] = {
        "token_variable": "${DISCORD_BOT_TOKEN}",
        "senders": "user ids",
    }

    api_base: str = "https://discord.com/api/v10"
    """Discord REST API URL; change only for a proxy."""
    gateway_url: str | None = None
    """Gateway websocket URL; null: the one Discord hands out."""

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("gateway_url")
    @classmethod
    def _ws_url(cls, value: str | None) -> str | None:
        return None if value is None else ws_url(value)


class ChannelsConfig(_Section):
    telegram: TelegramConfig = TelegramConfig()
    """The Telegram bot (see docs/telegram.md)."""
    discord: DiscordConfig = DiscordConfig()
    """The Discord bot (see docs/discord.md)."""
    matrix: MatrixConfig = MatrixConfig()
    """The Matrix bot (see README, "Matrix")."""
    slack: SlackConfig = SlackConfig()
    """The Slack app, in Socket Mode (see README, "Slack")."""


# Every chat platform, in the order status and the channels list them: a section above is the one
# place a platform is named (each has a token, an allow-list and the pairing policies).
CHAT_PLATFORMS: tuple[str, ...] = tuple(ChannelsConfig.model_fields)


class HealthConfig(_Section):
    listen: str | None = None  # e.g. "127.0.0.1:8765"
    """host:port for /healthz and /metrics; null: no health endpoint."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        return None if value is None else host_port(value)


# `<server>__<tool>` must stay a valid function name for every OpenAI-compatible endpoint.
class AutomationConfig(_Section):
    grace: float = Field(3600, ge=0)
    """Seconds a job that came due while memgate was stopped may be late and still run (once); later ones are skipped with a log line."""
    heartbeat: float = Field(1800, ge=0)
    """Seconds between heartbeats (the agent reads HEARTBEAT.md and may message automation.home); 0: off."""
    home: str | None = None
    """The owner's home chat for heartbeat messages, as channel:chat_id (e.g. telegram:123456); null: no heartbeat."""

    @field_validator("home")
    @classmethod
    def _chat(cls, value: str | None) -> str | None:
        if value is None:
            return None
        channel, sep, chat_id = value.partition(":")
        if not sep or channel not in CHAT_PLATFORMS or not chat_id.strip():
            names = ", ".join(CHAT_PLATFORMS)
            raise ValueError(f"must be <platform>:<chat id>, the platform one of {names}")
        return value


class Config(_Section):
    workspace: Path = Path("~/.memgate/workspace")
    """All memory, sessions and media as plain files."""
    # What the gateway keeps for itself (journals, channel state, search index, lock, sockets):
    # outside the workspace, so no tool of the model can name it.
    state_dir: Path = Path("~/.memgate/state")
    """What the gateway keeps for itself, outside the model's reach (journals, channel state, search index, lock, control socket)."""
    timezone: str = "UTC"
    """IANA time zone for timestamps shown to people and to the LLM."""
    llm: LLMConfig = LLMConfig()
    """The chat model."""
    memory: MemoryConfig = MemoryConfig()
    """Sessions and consolidation into MEMORY.md and HISTORY.md."""
    media: MediaConfig = MediaConfig()
    """Voice notes, images and documents people send."""
    agent: AgentConfig = AgentConfig()
    """The agent loop."""
    channels: ChannelsConfig = ChannelsConfig()
    """Chat platforms; `memgate run` needs one enabled."""
    health: HealthConfig = HealthConfig()
    """The health and metrics endpoint."""
    console: ConsoleConfig = ConsoleConfig()
    """The local web console (see README, "The web console")."""
    tools: ToolsConfig = ToolsConfig()
    """Tools from MCP servers (see README, "Tools from MCP servers")."""
    automation: AutomationConfig = AutomationConfig()
    """Scheduled jobs and the heartbeat (see docs/automation.md)."""
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """DEBUG, INFO, WARNING or ERROR; DEBUG also prints tracebacks."""
    shutdown_grace: float = Field(10, ge=0, le=600)
    """Seconds running answers and consolidation get to finish on stop."""
    # Where the config was read from; not a key of the file.
    source: Path | None = Field(None, exclude=True)

    @field_validator("workspace", "state_dir", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r}") from exc
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @property
    def consolidation_llm(self) -> LLMConfig:
        """llm with memory.llm's endpoint, key and model where they are set: what consolidation
        and compaction ask."""
        own = self.memory.llm
        if own is None:
            return self.llm
        changes = {"base_url": own.base_url, "api_key": own.api_key, "model": own.model}
        return self.llm.model_copy(update={k: v for k, v in changes.items() if v is not None})

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.timezone)

    def secrets(self) -> list[str]:
        """Every secret value in this config, for log redaction."""
        values = [self.llm.api_key, self.channels.telegram.token, self.channels.discord.token]
        values.append(self.channels.telegram.webhook_secret or "")
        values += [self.channels.matrix.token, self.channels.matrix.password]
        values += [self.channels.slack.token, self.channels.slack.app_token]
        values.append(self.memory.embeddings.api_key if self.memory.embeddings else "")
        values.append((self.llm.transcription and self.llm.transcription.api_key) or "")
        values.append((self.memory.llm and self.memory.llm.api_key) or "")
        values.append(self.tools.web.search.api_key)
        telegram = self.channels.telegram
        urls = [telegram.base_url, telegram.base_file_url, telegram.webhook_url]
        for server in self.tools.mcp_servers.values():
            urls.append(server.url)
            values.extend(server.env.values())
            for header in server.headers.values():
                # "Bearer <token>": the token alone is redacted wherever it shows up.
                values.extend([header, header.split()[-1] if header.split() else ""])
        for url in filter(None, urls):
            # A proxy's password or a token in a query string is as secret as an api_key.
            parts = urlsplit(url)
            values.append(parts.password or "")
            values.extend(v for _, _, v in (p.partition("=") for p in parts.query.split("&")))
        return [v for v in values if len(v) >= 6]
