"""Configuration: the YAML file, `${VAR}` expansion, validation and writing.

Every problem becomes a ConfigError naming the file, the dotted key and the offending value.
"""

from __future__ import annotations

import getpass
import os
import re
import zoneinfo
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.errors import ConfigError
from memory.fileio import atomic_write


def http_url(value: str) -> str:
    """An http(s) URL with a host, or a ValueError saying what is wrong."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL, e.g. http://localhost:11434/v1")
    return value


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


class _Section(BaseModel):
    # The string under each field is its meaning in docs/configuration.md.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


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
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value) if value else None


class LLMConfig(_Section):
    base_url: str = "https://api.openai.com/v1"
    """Any OpenAI-compatible endpoint, ending in /v1 (OpenAI, vLLM, Ollama, LiteLLM, llama.cpp)."""
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
    def _http_url(cls, value: str) -> str:
        return http_url(value)

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
    def _http_url(cls, value: str) -> str:
        return http_url(value)


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
    """Conversations answered at the same time."""


GroupPolicy = Literal["mention", "open", "off"]
DmPolicy = Literal["pairing", "allowlist", "open", "disabled"]


class ChatChannelConfig(_Section):
    """What every chat platform's section has."""

    enabled: bool = False
    """Run this channel in `memgate run`."""
    token: str = ""
    """The bot token (keep it in the env file, e.g. ${TELEGRAM_BOT_TOKEN})."""
    allow_from: list[str] = []  # user ids or @usernames; ["*"] for everyone; [] for nobody
    """Who may talk to the bot: user ids (or @usernames on Telegram); [] nobody (their ids are logged), [\"*\"] everyone."""
    group_policy: GroupPolicy = "mention"
    """In groups: mention (answer when mentioned or replied to), open (every message) or off."""
    dm_policy: DmPolicy = "pairing"
    """DMs from people not in allow_from: pairing (they get a code an owner approves), allowlist (ignored), open (anyone; needs allow_from ["*"]) or disabled (no DMs at all)."""

    @field_validator("allow_from", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        # YAML reads `allow_from: [12345]` as integers; ids are compared as strings.
        return [str(v) for v in value] if isinstance(value, list) else value


class TelegramConfig(ChatChannelConfig):
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


class HealthConfig(_Section):
    listen: str | None = None  # e.g. "127.0.0.1:8765"
    """host:port for /healthz and /metrics; null: no health endpoint."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        return None if value is None else host_port(value)


# `<server>__<tool>` must stay a valid function name for every OpenAI-compatible endpoint.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")


class McpServerConfig(_Section):
    """One MCP server: a command run over stdio, or a streamable HTTP URL."""

    command: str | None = None
    """stdio: the program to run (e.g. npx, uvx, python); give this or url."""
    args: list[str] = []
    """stdio: its arguments."""
    env: dict[str, str] = {}
    """stdio: its environment variables; of memgate's own it gets only HOME, LOGNAME, PATH, SHELL, TERM and USER (values are treated as secrets)."""
    cwd: Path | None = None
    """stdio: the folder it runs in; null: memgate's own."""
    url: str | None = None
    """Streamable HTTP: the server's endpoint, e.g. http://127.0.0.1:8000/mcp; give this or command."""
    headers: dict[str, str] = {}
    """HTTP: headers sent with every request, e.g. Authorization (values are treated as secrets)."""
    enabled: bool = True
    """false: keep the entry but do not start the server."""
    timeout: float = Field(30, gt=0, le=3600)
    """Seconds one tool call may take; past it the model is told the call timed out."""
    start_timeout: float = Field(20, gt=0, le=600)
    """Seconds the server gets to start and list its tools; past it memgate runs without it."""
    scopes: list[Literal["private", "group"]] = ["private"]
    """Chats offered its tools: private (the owner's DMs and the terminal) and/or group (groups and guests)."""
    allow: list[str] | None = None
    """Tool names (the server's own, without the prefix) to offer; null: all of them."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)

    @field_validator("cwd", mode="after")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        return None if value is None else value.expanduser()

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP), not both")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd belong to a command server, not a url one")
        if self.command is not None and self.headers:
            raise ValueError("headers belong to a url server, not a command one")
        return self


class ToolsConfig(_Section):
    mcp_servers: dict[str, McpServerConfig] = {}
    """MCP servers whose tools the model may call, by name; each tool is offered as `<name>__<tool>`."""

    @field_validator("mcp_servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            if not _SERVER_NAME.match(name) or len(name) > 32:
                raise ValueError(
                    f"server name {name!r} must be 1-32 letters, digits, - or single _"
                )
        return value


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
        if not sep or channel not in ("telegram", "discord") or not chat_id.strip():
            raise ValueError("must be telegram:<chat id> or discord:<channel id>")
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
    def tz(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.timezone)

    def secrets(self) -> list[str]:
        """Every secret value in this config, for log redaction."""
        values = [self.llm.api_key, self.channels.telegram.token, self.channels.discord.token]
        values.append(self.channels.telegram.webhook_secret or "")
        values.append(self.memory.embeddings.api_key if self.memory.embeddings else "")
        values.append((self.llm.transcription and self.llm.transcription.api_key) or "")
        for server in self.tools.mcp_servers.values():
            values.extend(server.env.values())
            for header in server.headers.values():
                # "Bearer <token>": the token alone is redacted wherever it shows up.
                values.extend([header, header.split()[-1] if header.split() else ""])
        return [v for v in values if len(v) >= 6]


# ------------------------------------------------------------------------------------------------
# Locating, expanding, loading


def memgate_home() -> Path:
    return Path(os.environ.get("MEMGATE_HOME") or "~/.memgate").expanduser()


def default_config_path() -> Path:
    """`$MEMGATE_CONFIG`, else `$MEMGATE_HOME/config.yaml`."""
    explicit = os.environ.get("MEMGATE_CONFIG")
    return Path(explicit).expanduser() if explicit else memgate_home() / "config.yaml"


def default_workspace() -> Path:
    return memgate_home() / "workspace"


def default_state_dir() -> Path:
    return memgate_home() / "state"


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(
    value: Any, key: str, env: dict[str, str], missing: dict[str, str], stand_in: str | None
) -> Any:
    """Expand `${VAR}` / `${VAR:-default}` in every string; record unset variables by key.

    With a `stand_in`, an unset variable of a secret key becomes that text instead of missing."""
    if isinstance(value, dict):
        return {
            k: _expand(v, f"{key}.{k}" if key else str(k), env, missing, stand_in)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand(v, f"{key}[{i}]", env, missing, stand_in) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        if stand_in is not None and key.rsplit(".", 1)[-1] in _SECRET_KEYS:
            return stand_in
        missing.setdefault(key, name)
        return ""

    return _VAR.sub(substitute, value)


def _dotted(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


def _lookup(tree: Any, loc: tuple[Any, ...]) -> Any:
    for part in loc:
        try:
            tree = tree[part]
        except (KeyError, IndexError, TypeError):
            return None
    return tree


_SECRET_KEYS = {"api_key", "token", "webhook_secret"}  # their values never appear in a message


def parse_config(
    raw: dict[str, Any],
    path: Path,
    env: dict[str, str] | None = None,
    *,
    secret_stand_in: str | None = None,
) -> Config:
    """Validate an already-parsed YAML mapping; errors name `path`, the key and the value.

    `secret_stand_in` replaces secrets whose variable is unset, for commands that never use them."""
    missing: dict[str, str] = {}
    raw = {"state_dir": str(default_state_dir()), **raw}
    env = dict(os.environ) if env is None else env
    expanded = _expand(raw, "", env, missing, secret_stand_in)
    try:
        config = Config.model_validate({**expanded, "source": path})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(p for p in first["loc"] if p not in ("function-after", "function-before"))
        key = _dotted(loc)
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{path}: unknown key {key!r}", path=str(path), key=key) from None
        value = _lookup(raw, loc)
        secret = key.rsplit(".", 1)[-1] in _SECRET_KEYS or _under_secret_map(loc)
        shown = "" if value is None or isinstance(value, dict) or secret else f" = {value!r}"
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(
            f"{path}: {key or '(top level)'}{shown}: {message}", path=str(path), key=key
        ) from None
    for key, var in missing.items():
        if _in_disabled_channel(config, key):
            continue
        raise ConfigError(
            f"{path}: {key} = '${{{var}}}': environment variable {var} is not set "
            f"(set it, or write '${{{var}:-default}}')",
            path=str(path),
            key=key,
        )
    _check_relations(config, path)
    return config


def _under_secret_map(loc: tuple[Any, ...]) -> bool:
    """Values of an MCP server's `headers` and `env` are tokens as often as not."""
    return any(part in ("headers", "env") for part in loc[:-1])


def _check_relations(config: Config, path: Path) -> None:
    """Rules that involve more than one key, reported on the key a person would change."""

    def fail(key: str, value: Any, message: str) -> None:
        raise ConfigError(f"{path}: {key} = {value!r}: {message}", path=str(path), key=key)

    llm, memory = config.llm, config.memory
    for key in ("workspace", "state_dir"):
        folder = getattr(config, key)
        if folder.exists() and not folder.is_dir():
            fail(key, str(folder), "exists and is not a folder")
    if llm.context_window - llm.max_tokens - 1024 < 1024:
        fail(
            "llm.max_tokens",
            llm.max_tokens,
            f"leaves less than 1024 prompt tokens in llm.context_window ({llm.context_window})",
        )
    if memory.consolidate_to >= memory.consolidate_at:
        fail(
            "memory.consolidate_to",
            memory.consolidate_to,
            f"must be below memory.consolidate_at ({memory.consolidate_at})",
        )
    embeddings = memory.embeddings
    if embeddings is not None and embeddings.vector_weight + embeddings.keyword_weight == 0:
        fail("memory.embeddings.vector_weight", 0, "and keyword_weight cannot both be 0")
    for name, var in (("telegram", "TELEGRAM_BOT_TOKEN"), ("discord", "DISCORD_BOT_TOKEN")):
        channel = getattr(config.channels, name)
        if channel.enabled and not channel.token:
            fail(f"channels.{name}.token", "", f"required when the channel is enabled (set {var})")
        if channel.dm_policy == "open" and "*" not in channel.allow_from:
            fail(
                f"channels.{name}.dm_policy",
                "open",
                'lets anyone in, so it needs allow_from: ["*"]',
            )


def _in_disabled_channel(config: Config, key: str) -> bool:
    """Unset variables under a disabled channel or MCP server are harmless: never used."""
    for name in ("telegram", "discord"):
        if key.startswith(f"channels.{name}.") and not getattr(config.channels, name).enabled:
            return True
    for name, server in config.tools.mcp_servers.items():
        if key.startswith(f"tools.mcp_servers.{name}.") and not server.enabled:
            return True
    return False


def permission_hint(path: Path, action: str) -> str:
    """One line naming the path, who we are and the usual fix."""
    user = getpass.getuser()
    return (
        f"{path}: permission denied to {action} it as user {user!r} "
        f"(fix: sudo chown -R {user} {path.parent}, or run memgate as the owner)"
    )


OPENAI_URL = "https://api.openai.com/v1"


def require_api_key(config: Config) -> None:
    """OpenAI itself needs a key; any other endpoint (Ollama, llama.cpp) may do without."""
    if config.llm.base_url.rstrip("/") == OPENAI_URL and not config.llm.api_key:
        raise ConfigError(
            f"{config.source}: llm.api_key is empty and llm.base_url is OpenAI's: set llm.api_key "
            "there or export OPENAI_API_KEY (or point llm.base_url at a local server)",
            path=str(config.source),
            key="llm.api_key",
        )


def load_config(
    path: Path | None = None,
    env: dict[str, str] | None = None,
    *,
    must_exist: bool = False,
    secret_stand_in: str | None = None,
) -> Config:
    """Read and validate the config file; a missing file gives the defaults unless `must_exist`.

    `secret_stand_in`: see parse_config."""
    path = (path or default_config_path()).expanduser()
    if must_exist and not path.exists():
        raise ConfigError(f"{path}: no such config file", path=str(path))
    if not path.exists():
        return parse_config(
            {"workspace": str(default_workspace())}, path, env, secret_stand_in=secret_stand_in
        )
    try:
        text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        # One line, file:line:column: reason; never the offending text, which may be a secret.
        mark = getattr(exc, "problem_mark", None)
        where = f"{mark.line + 1}:{mark.column + 1}:" if mark else ""
        reason = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"{path}:{where} {reason}", path=str(path)) from None
    except PermissionError:
        raise ConfigError(permission_hint(path, "read"), path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})", path=str(path)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys", path=str(path))
    raw.setdefault("workspace", str(default_workspace()))
    return parse_config(raw, path, env, secret_stand_in=secret_stand_in)


def write_private(path: Path, text: str) -> None:
    """Write a file readable only by its owner (mode 0600), atomically."""
    atomic_write(path, text)


def update_llm_section(path: Path, base_url: str, api_key: str | None, model: str) -> None:
    """Set llm.base_url, llm.api_key (unless None) and llm.model in an existing config, keeping
    every other key.

    The file is parsed and written back, so its comments are not kept; the values are.
    """
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        raise ConfigError(
            f"{path}: not valid YAML; fix it or move it away first", path=str(path)
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys", path=str(path))
    llm = raw.get("llm")
    section = {**(llm if isinstance(llm, dict) else {}), "base_url": base_url, "model": model}
    if api_key is not None:
        section["api_key"] = api_key
    raw["llm"] = section
    header = "# memgate configuration; every key is described in docs/configuration.md.\n"
    write_private(path, header + yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))


def render_config(
    *,
    workspace: Path,
    base_url: str = "https://api.openai.com/v1",
    api_key: str = "${OPENAI_API_KEY}",
    model: str = "gpt-4o-mini",
) -> str:
    """The commented config file `memgate init` and the first-run prompt write."""
    key_line = yaml.safe_dump({"api_key": api_key}, allow_unicode=True).strip()
    return f"""\
# memgate configuration; every key is described in docs/configuration.md. ${{VAR}} and ${{VAR:-default}} are read from the environment,
# so secrets can stay in an env file. Unknown keys are errors.
workspace: {yaml.safe_dump(str(workspace)).splitlines()[0]}
timezone: UTC
llm:
  base_url: {base_url}
  {key_line}
  model: {model}
  context_window: 128000
  max_tokens: 4096
memory:
  window: 100
  groups: private          # private | shared
channels:
  telegram:
    enabled: false
    token: ${{TELEGRAM_BOT_TOKEN}}
    allow_from: []         # your numeric Telegram user id or "@username"; ["*"] lets everyone in
    group_policy: mention  # mention | open | off
  discord:
    enabled: false
    token: ${{DISCORD_BOT_TOKEN}}
    allow_from: []         # Discord user ids
    group_policy: mention
log_level: INFO
"""
