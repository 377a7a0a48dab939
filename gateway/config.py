"""Configuration: the YAML file of SPEC §6, `${VAR}` expansion, validation and writing.

Every problem becomes a ConfigError naming the file, the dotted key and the offending value.
"""

from __future__ import annotations

import os
import re
import zoneinfo
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.errors import ConfigError
from memory.fileio import atomic_write


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMConfig(_Section):
    base_url: str = "https://api.openai.com/v1"
    api_key: str = ""
    model: str = "gpt-4o-mini"
    context_window: int = Field(128_000, ge=2048)
    max_tokens: int = Field(4096, ge=16)
    temperature: float = Field(0.7, ge=0, le=2)
    timeout: float = Field(60, gt=0)
    max_retries: int = Field(2, ge=0, le=10)

    @property
    def budget(self) -> int:
        """Tokens the prompt may use (SPEC §4)."""
        return self.context_window - self.max_tokens - 1024


class EmbeddingsConfig(_Section):
    """An OpenAI-compatible embeddings endpoint for semantic memory search."""

    base_url: str
    api_key: str = ""
    model: str = "text-embedding-3-small"
    vector_weight: float = Field(0.7, ge=0, le=1)
    keyword_weight: float = Field(0.3, ge=0, le=1)
    timeout: float = Field(30, gt=0)  # seconds for one embeddings request


class MemoryConfig(_Section):
    window: int = Field(100, ge=4)
    consolidate_at: float = Field(0.75, gt=0, le=1)
    consolidate_to: float = Field(0.5, gt=0, lt=1)
    workers: int = Field(2, ge=1, le=32)
    consolidate_on_new: bool = True
    max_history_messages: int = Field(0, ge=0)
    groups: Literal["private", "shared"] = "private"
    timeout: float = Field(120, gt=0)  # seconds for one consolidation call
    # Share of the prompt budget the fixed files (bootstrap files, MEMORY.md, today's note) may
    # take together; a file over its part is cut in the prompt, with a warning naming it.
    fixed_share: float = Field(0.5, ge=0.1, le=0.9)
    # Consolidation compacts a MEMORY.md larger than this toward it.
    max_memory_tokens: int = Field(4000, ge=256)
    embeddings: EmbeddingsConfig | None = None  # None: memory search on keywords alone


class AgentConfig(_Section):
    max_iterations: int = Field(20, ge=1, le=200)
    max_concurrency: int = Field(8, ge=1, le=256)


GroupPolicy = Literal["mention", "open", "off"]


class ChatChannelConfig(_Section):
    """What every chat platform's section has."""

    enabled: bool = False
    token: str = ""
    allow_from: list[str] = []  # user ids or @usernames; ["*"] for everyone; [] for nobody
    group_policy: GroupPolicy = "mention"

    @field_validator("allow_from", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        # YAML reads `allow_from: [12345]` as integers; ids are compared as strings.
        return [str(v) for v in value] if isinstance(value, list) else value


class TelegramConfig(ChatChannelConfig):
    base_url: str = "https://api.telegram.org/bot"
    base_file_url: str | None = None
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1:8443"
    webhook_secret: str | None = None


class DiscordConfig(ChatChannelConfig):
    api_base: str = "https://discord.com/api/v10"
    gateway_url: str | None = None


class ChannelsConfig(_Section):
    telegram: TelegramConfig = TelegramConfig()
    discord: DiscordConfig = DiscordConfig()


class HealthConfig(_Section):
    listen: str | None = None  # e.g. "127.0.0.1:8765"


class Config(_Section):
    workspace: Path = Path("~/.memgate/workspace")
    # What the gateway keeps for itself (journals, channel state, search index, lock, sockets):
    # outside the workspace, so no tool of the model can name it.
    state_dir: Path = Path("~/.memgate/state")
    timezone: str = "UTC"
    llm: LLMConfig = LLMConfig()
    memory: MemoryConfig = MemoryConfig()
    agent: AgentConfig = AgentConfig()
    channels: ChannelsConfig = ChannelsConfig()
    health: HealthConfig = HealthConfig()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    shutdown_grace: float = Field(10, ge=0, le=600)
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


def _expand(value: Any, key: str, env: dict[str, str], missing: dict[str, str]) -> Any:
    """Expand `${VAR}` / `${VAR:-default}` in every string; record unset variables by key."""
    if isinstance(value, dict):
        return {
            k: _expand(v, f"{key}.{k}" if key else str(k), env, missing) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_expand(v, f"{key}[{i}]", env, missing) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
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


def parse_config(raw: dict[str, Any], path: Path, env: dict[str, str] | None = None) -> Config:
    """Validate an already-parsed YAML mapping; errors name `path`, the key and the value."""
    missing: dict[str, str] = {}
    raw = {"state_dir": str(default_state_dir()), **raw}
    expanded = _expand(raw, "", dict(os.environ) if env is None else env, missing)
    try:
        config = Config.model_validate({**expanded, "source": path})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(p for p in first["loc"] if p not in ("function-after", "function-before"))
        key = _dotted(loc)
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"{path}: unknown key {key!r}", path=str(path), key=key) from None
        value = _lookup(raw, loc)
        shown = "" if value is None or isinstance(value, dict) else f" = {value!r}"
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


def _check_relations(config: Config, path: Path) -> None:
    """Rules that involve more than one key, reported on the key a person would change."""

    def fail(key: str, value: Any, message: str) -> None:
        raise ConfigError(f"{path}: {key} = {value!r}: {message}", path=str(path), key=key)

    llm, memory = config.llm, config.memory
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


def _in_disabled_channel(config: Config, key: str) -> bool:
    """Unset variables under a disabled channel are harmless: the values are never used."""
    for name in ("telegram", "discord"):
        if key.startswith(f"channels.{name}.") and not getattr(config.channels, name).enabled:
            return True
    return False


def load_config(path: Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Read and validate the config file; a missing file gives the defaults."""
    path = (path or default_config_path()).expanduser()
    if not path.exists():
        return parse_config({"workspace": str(default_workspace())}, path, env)
    try:
        text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where}: not valid YAML ({exc})", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})", path=str(path)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys", path=str(path))
    raw.setdefault("workspace", str(default_workspace()))
    return parse_config(raw, path, env)


def write_private(path: Path, text: str) -> None:
    """Write a file readable only by its owner (mode 0600), atomically."""
    atomic_write(path, text)


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
# memgate configuration (SPEC §6). ${{VAR}} and ${{VAR:-default}} are read from the environment,
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
