"""Reloading who may talk to the bot while the service runs (SIGHUP, `systemctl reload memgate`).

Only the access settings of each channel (`allow_from`, `dm_policy`, `group_policy`) change in the
running process; any other key that differs from the running configuration is logged as needing a
restart. A file that does not load leaves everything as it was. `AccessInForce` holds the settings
in force, so the scheduler can ask whether a job's maker is still an owner when the job runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from channels.admission import AllowList
from gateway.config.file import load_config
from gateway.config.models import CHAT_PLATFORMS, Config
from gateway.errors import ConfigError

log = logging.getLogger(__name__)

ACCESS_KEYS = ("allow_from", "dm_policy", "group_policy")
CHAT_CHANNELS = CHAT_PLATFORMS  # the channels with an allow-list


class AccessControlled(Protocol):
    """A channel whose access settings can be replaced between two messages."""

    name: str

    def set_access(
        self, *, allow_from: Iterable[str], dm_policy: str, group_policy: str
    ) -> None: ...


def reload_access(current: Config, channels: Iterable[AccessControlled]) -> Config:
    """Read the config file again, apply its access settings; return the configuration in force."""
    try:
        fresh = load_config(current.source, must_exist=True)
    except ConfigError as exc:
        # One log line, though a file with several problems names each on a line of its own.
        problems = str(exc).replace("\n", "; ")
        log.error("reload refused, the running settings stay: %s", problems)
        return current
    sections = {
        name: getattr(current.channels, name).model_copy(
            update={key: getattr(getattr(fresh.channels, name), key) for key in ACCESS_KEYS}
        )
        for name in CHAT_CHANNELS
    }
    applied: list[str] = []
    for channel in channels:
        section = sections.get(channel.name)
        if section is None:
            continue
        try:
            channel.set_access(
                allow_from=section.allow_from,
                dm_policy=section.dm_policy,
                group_policy=section.group_policy,
            )
        except ValueError as exc:
            log.error("reload refused for channel=%s, its settings stay: %s", channel.name, exc)
            sections[channel.name] = getattr(current.channels, channel.name)
            continue
        applied.append(channel.name)
    in_force = current.model_copy(update={"channels": current.channels.model_copy(update=sections)})
    waiting = changed_keys(in_force, fresh)
    log.info("config reloaded: access settings applied channels=%s", ",".join(applied) or "-")
    if waiting:
        log.warning("config reload: needs a restart to change %s", ", ".join(waiting))
    return in_force


class AccessInForce:
    """The configuration whose access settings are in force: the loaded one, then each reload's."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def reload(self, channels: Iterable[AccessControlled]) -> None:
        self.config = reload_access(self.config, channels)

    def is_owner(self, channel: str, sender_id: str, username: str | None) -> bool:
        """Listed in the channel's allow_from now (by id, or by @name on Telegram)."""
        if channel not in CHAT_CHANNELS:
            return True  # the terminal has no allow-list: its user holds the workspace
        section = getattr(self.config.channels, channel)
        allowed: list[str] = section.allow_from
        return AllowList(allowed).is_owner(sender_id, username)


def changed_keys(old: Config, new: Config) -> list[str]:
    """Dotted keys whose values differ; values are never shown (some are secrets)."""
    before, after = _flat(old.model_dump(mode="json")), _flat(new.model_dump(mode="json"))
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat
