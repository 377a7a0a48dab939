"""The config file: where it is, `${VAR}` expansion, loading and validation into a `Config`,
and writing it (`memgate init` and `setup`).

Every problem becomes a ConfigError naming the file, the dotted key and the offending value; the
settings themselves are the models in gateway/config/models.py.
"""

from __future__ import annotations

import getpass
import io
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gateway.config.models import Config, mask_url
from gateway.errors import ConfigError
from memory.fileio import atomic_write


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
    runs_channels: bool = True,
) -> Config:
    """Validate an already-parsed YAML mapping; errors name `path`, the key and the value.

    `secret_stand_in` replaces secrets whose variable is unset, for commands that never use them.
    Without `runs_channels` (`chat`, `status`, `memory`, `jobs`, `pairing`: commands that connect
    to no platform), an enabled channel may lack its token: a shell without the service's
    environment can still use them."""
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
        if isinstance(value, str):
            value = mask_url(value)  # a URL's password or query may be a key
        shown = "" if value is None or isinstance(value, dict) or secret else f" = {value!r}"
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(
            f"{path}: {key or '(top level)'}{shown}: {message}", path=str(path), key=key
        ) from None
    for key, var in missing.items():
        if _in_disabled_channel(config, key) or (not runs_channels and key.startswith("channels.")):
            continue
        raise ConfigError(
            f"{path}: {key} = '${{{var}}}': environment variable {var} is not set "
            f"(set it, or write '${{{var}:-default}}')",
            path=str(path),
            key=key,
        )
    _check_relations(config, path, runs_channels)
    return config


def _under_secret_map(loc: tuple[Any, ...]) -> bool:
    """Values of an MCP server's `headers` and `env` are tokens as often as not."""
    return any(part in ("headers", "env") for part in loc[:-1])


def _check_relations(config: Config, path: Path, runs_channels: bool = True) -> None:
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
        if channel.enabled and not channel.token and runs_channels:
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
# What init writes for the key: empty while the variable is unset, which only OpenAI's URL refuses
# (require_api_key), so a local endpoint works without it.
OPENAI_KEY_REF = "${OPENAI_API_KEY:-}"


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
    runs_channels: bool = True,
) -> Config:
    """Read and validate the config file; a missing file gives the defaults unless `must_exist`.

    `secret_stand_in`, `runs_channels`: see parse_config."""
    path = (path or default_config_path()).expanduser()
    if must_exist and not path.exists():
        raise ConfigError(f"{path}: no such config file", path=str(path))
    if not path.exists():
        return parse_config(
            {"workspace": str(default_workspace())},
            path,
            env,
            secret_stand_in=secret_stand_in,
            runs_channels=runs_channels,
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
    return parse_config(
        raw, path, env, secret_stand_in=secret_stand_in, runs_channels=runs_channels
    )


def write_private(path: Path, text: str) -> None:
    """Write a file readable only by its owner (mode 0600), atomically."""
    atomic_write(path, text)


def update_llm_section(path: Path, base_url: str, api_key: str | None, model: str) -> None:
    """Set llm.base_url, llm.api_key (unless None) and llm.model in an existing config, keeping
    every other key, every comment, the order and the indentation.

    The file is round-tripped through ruamel.yaml (comments kept), then read back as
    `load_config` reads it: unless it means what it meant with only those keys changed, nothing
    is written.
    """
    # Only setup writes the file: every other command is spared ruamel's import.
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    text = path.read_text(encoding="utf-8")
    editor = YAML()  # round-trip: comments, order, quoting and flow style kept
    editor.preserve_quotes = True
    editor.width = 4096  # never fold a long value onto a second line
    mapping, sequence, offset = _indents(text)
    editor.indent(mapping=mapping, sequence=sequence, offset=offset)
    try:
        before = yaml.safe_load(text) or {}
        tree = editor.load(text)
    except (yaml.YAMLError, YAMLError):
        raise ConfigError(
            f"{path}: not valid YAML (or a key appears twice); fix it or move it away first",
            path=str(path),
        ) from None
    if tree is None:
        tree = CommentedMap()
    if not isinstance(tree, dict) or not isinstance(before, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys", path=str(path))
    if not isinstance(tree.get("llm"), dict):
        tree["llm"] = CommentedMap()
    values = {"base_url": base_url, "model": model}
    if api_key is not None:
        values["api_key"] = api_key
    for key, value in values.items():
        # Quoted unless a YAML 1.1 reader takes the bare text for this very string.
        tree["llm"][key] = value if _plain_is_same(value) else DoubleQuotedScalarString(value)
    out = io.StringIO()
    editor.dump(tree, out)
    llm = before.get("llm")
    expected = {**before, "llm": {**(llm if isinstance(llm, dict) else {}), **values}}
    if yaml.safe_load(out.getvalue()) != expected:
        raise ConfigError(
            f"{path}: could not rewrite the llm section without changing other keys; "
            "edit llm.base_url, llm.api_key and llm.model by hand",
            path=str(path),
            key="llm",
        )
    write_private(path, out.getvalue())


def _plain_is_same(value: str) -> bool:
    try:
        return bool(yaml.safe_load(value) == value)
    except yaml.YAMLError:
        return False


def _indents(text: str) -> tuple[int, int, int]:
    """The file's (mapping, sequence, offset) indentation as ruamel names them: from its first
    nested key and its first block-sequence item; ruamel's 2, 2, 0 where it has none."""
    mapping = sequence = offset = None
    opener = None  # the indentation of the last `key:` line that opens a block
    for line in text.splitlines():
        body = line.lstrip(" ").split(" #", 1)[0].rstrip()
        if not body or body.startswith("#"):
            continue
        column = len(line) - len(line.lstrip(" "))
        if opener is not None and body.startswith("- ") and column >= opener and sequence is None:
            after = body[1:]
            offset = column - opener
            sequence = offset + 1 + len(after) - len(after.lstrip(" "))
        elif opener is not None and column > opener and mapping is None:
            mapping = column - opener
        opener = column if body.endswith(":") and not body.startswith("- ") else None
    offset = offset or 0
    return mapping or 2, max(sequence or 2, offset + 2), offset


def render_config(
    *,
    workspace: Path,
    base_url: str = OPENAI_URL,
    api_key: str = OPENAI_KEY_REF,
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
  {key_line}  # needed by OpenAI's URL; a local server may go without
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
