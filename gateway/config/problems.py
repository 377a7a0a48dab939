"""What is wrong with a config, as lines a person can act on: `path:line: key = value: message`.

Every problem of a file is reported at once (a ConfigError whose lines are one each), values of
secret keys left out and URLs masked. Knows nothing of YAML: the loader says on which line a key
stands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.config.fields import mask_url
from gateway.config.models import Config
from gateway.errors import ConfigError

SECRET_KEYS = {"api_key", "token", "webhook_secret"}  # their values never appear in a message

LineOf = Callable[[tuple[Any, ...]], int | None]
"""The 1-based line on which a key (as a path of names and indexes) is written, if known."""


@dataclass(frozen=True)
class Problem:
    loc: tuple[Any, ...]
    text: str  # `key = value: message`, without the file


def dotted(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


def config_error(path: Path, problems: list[Problem], line_of: LineOf | None) -> ConfigError:
    """One line a problem, in the order found (the first is the one a single error would give)."""
    lines = []
    for problem in problems:
        line = line_of(problem.loc) if line_of is not None else None
        lines.append(f"{path}:{line}: {problem.text}" if line else f"{path}: {problem.text}")
    return ConfigError("\n".join(lines), path=str(path), key=dotted(problems[0].loc))


def invalid_values(exc: ValidationError, raw: dict[str, Any]) -> list[Problem]:
    """Each key pydantic refused, once, with the value as written (unless secret)."""
    problems: list[Problem] = []
    seen: set[tuple[Any, ...]] = set()
    for error in exc.errors():
        loc = _trim(
            tuple(p for p in error["loc"] if p not in ("function-after", "function-before")), raw
        )
        if loc in seen:  # a union's members each refuse the same value
            continue
        seen.add(loc)
        key = dotted(loc)
        if error["type"] == "extra_forbidden":
            problems.append(Problem(loc, f"unknown key {key!r}"))
            continue
        value = _lookup(raw, loc)
        secret = (bool(loc) and loc[-1] in SECRET_KEYS) or _under_secret_map(loc)
        if isinstance(value, str):
            value = mask_url(value)  # a URL's password or query may be a key
        shown = "" if value is None or isinstance(value, dict) or secret else f" = {value!r}"
        message = error["msg"].removeprefix("Value error, ")
        problems.append(Problem(loc, f"{key or '(top level)'}{shown}: {message}"))
    return problems


def unset_variables(missing: dict[tuple[Any, ...], str]) -> list[Problem]:
    return [
        Problem(
            loc,
            f"{dotted(loc)} = '${{{var}}}': environment variable {var} is not set "
            f"(set it, or write '${{{var}:-default}}')",
        )
        for loc, var in missing.items()
    ]


def broken_rules(config: Config, runs_channels: bool = True) -> Iterator[Problem]:
    """Rules that involve more than one key, each reported on the key a person would change."""

    def problem(key: str, value: Any, message: str) -> Problem:
        return Problem(tuple(key.split(".")), f"{key} = {value!r}: {message}")

    llm, memory = config.llm, config.memory
    for key in ("workspace", "state_dir"):
        folder = getattr(config, key)
        if folder.exists() and not folder.is_dir():
            yield problem(key, str(folder), "exists and is not a folder")
    if llm.context_window - llm.max_tokens - 1024 < 1024:
        yield problem(
            "llm.max_tokens",
            llm.max_tokens,
            f"leaves less than 1024 prompt tokens in llm.context_window ({llm.context_window})",
        )
    if memory.consolidate_to >= memory.consolidate_at:
        yield problem(
            "memory.consolidate_to",
            memory.consolidate_to,
            f"must be below memory.consolidate_at ({memory.consolidate_at})",
        )
    embeddings = memory.embeddings
    if embeddings is not None and embeddings.vector_weight + embeddings.keyword_weight == 0:
        yield problem("memory.embeddings.vector_weight", 0, "and keyword_weight cannot both be 0")
    slack = config.channels.slack
    if slack.enabled and not slack.app_token and runs_channels:
        yield problem("channels.slack.app_token", "", "required when Slack is enabled (xapp-…)")
    tokens = (("telegram", "TELEGRAM_BOT_TOKEN"), ("discord", "DISCORD_BOT_TOKEN"))
    for name, var in (*tokens, ("slack", "SLACK_BOT_TOKEN")):
        channel = getattr(config.channels, name)
        if channel.enabled and not channel.token and runs_channels:
            yield problem(
                f"channels.{name}.token", "", f"required when the channel is enabled (set {var})"
            )
        if channel.dm_policy == "open" and "*" not in channel.allow_from:
            yield problem(
                f"channels.{name}.dm_policy",
                "open",
                'lets anyone in, so it needs allow_from: ["*"]',
            )


def _lookup(tree: Any, loc: tuple[Any, ...]) -> Any:
    for part in loc:
        try:
            tree = tree[part]
        except (KeyError, IndexError, TypeError):
            return None
    return tree


def _trim(loc: tuple[Any, ...], tree: Any) -> tuple[Any, ...]:
    """`loc` up to the first part that names no key of what was written: pydantic appends the
    member a union tried (`llm.vision.bool`), which is no key of the file."""
    for depth, part in enumerate(loc):
        if not isinstance(tree, dict | list):
            return loc[:depth]
        try:
            tree = tree[part]
        except (KeyError, IndexError, TypeError):
            return loc[: depth + 1]  # a missing key is still the key to name
    return loc


def _under_secret_map(loc: tuple[Any, ...]) -> bool:
    """Values of an MCP server's `headers` and `env` are tokens as often as not."""
    return any(part in ("headers", "env") for part in loc[:-1])
