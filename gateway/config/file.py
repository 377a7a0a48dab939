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

from gateway.config.models import CHAT_PLATFORMS, Config
from gateway.config.problems import (
    SECRET_KEYS,
    LineOf,
    broken_rules,
    config_error,
    dotted,
    invalid_values,
    unset_variables,
)
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
    value: Any,
    loc: tuple[Any, ...],
    env: dict[str, str],
    missing: dict[tuple[Any, ...], str],
    stand_in: str | None,
) -> Any:
    """Expand `${VAR}` / `${VAR:-default}` in every string; record unset variables by key.

    With a `stand_in`, an unset variable of a secret key becomes that text instead of missing."""
    if isinstance(value, dict):
        return {k: _expand(v, (*loc, k), env, missing, stand_in) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, (*loc, i), env, missing, stand_in) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        if stand_in is not None and loc and loc[-1] in SECRET_KEYS:
            return stand_in
        missing.setdefault(loc, name)
        return ""

    return _VAR.sub(substitute, value)


def parse_config(
    raw: dict[str, Any],
    path: Path,
    env: dict[str, str] | None = None,
    *,
    secret_stand_in: str | None = None,
    runs_channels: bool = True,
    line_of: LineOf | None = None,
) -> Config:
    """Validate an already-parsed YAML mapping; errors name `path`, the key and the value, every
    problem of the file at once (on the line `line_of` gives, when given).

    `secret_stand_in` replaces secrets whose variable is unset, for commands that never use them.
    Without `runs_channels` (`chat`, `status`, `memory`, `jobs`, `pairing`: commands that connect
    to no platform), an enabled channel may lack its token: a shell without the service's
    environment can still use them."""
    missing: dict[tuple[Any, ...], str] = {}
    raw = {"state_dir": str(default_state_dir()), **raw}
    env = dict(os.environ) if env is None else env
    expanded = _expand(raw, (), env, missing, secret_stand_in)
    try:
        config = Config.model_validate({**expanded, "source": path})
    except ValidationError as exc:
        # The rules across keys need a valid config: they are checked once every key is.
        raise config_error(path, invalid_values(exc, raw), line_of) from None
    unset = {
        loc: var
        for loc, var in missing.items()
        if not _in_disabled_channel(config, dotted(loc)) and (runs_channels or loc[0] != "channels")
    }
    # One line a key: a token whose variable is unset is not also "required".
    rules = [rule for rule in broken_rules(config, runs_channels) if rule.loc not in unset]
    problems = unset_variables(unset) + rules
    if problems:
        raise config_error(path, problems, line_of)
    return config


def _in_disabled_channel(config: Config, key: str) -> bool:
    """Unset variables under a disabled channel or MCP server are harmless: never used."""
    for name in CHAT_PLATFORMS:
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
        raw, node = _parse_yaml(text)
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
        raw,
        path,
        env,
        secret_stand_in=secret_stand_in,
        runs_channels=runs_channels,
        line_of=lambda loc: _line_of(node, loc),
    )


def _parse_yaml(text: str) -> tuple[Any, yaml.Node | None]:
    """The document's data (as `yaml.safe_load` gives it) and its node tree, which knows the line
    of every key, from one parse."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None) or {}, node
    finally:
        loader.dispose()


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The line of the key at `loc`, or of the nearest key above it that is written."""
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            pairs = [
                (k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part
            ]
            if not pairs:
                return line
            key, node = pairs[-1]  # of duplicate keys, the last is the one a load keeps
            line = key.start_mark.line + 1
        elif (
            isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value)
        ):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


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
# The web console `memgate run` serves (`memgate console` prints its login URL); null: none.
console:
  listen: 127.0.0.1:8766   # loopback only; reach it from elsewhere over an SSH tunnel
log_level: INFO
"""
