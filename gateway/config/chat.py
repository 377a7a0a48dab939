"""What every chat platform's config section has: the token, who may talk to the bot and how
(allow_from, dm_policy, group_policy), streaming. Each platform's section extends it, in
gateway/config/models.py or a module of its own (gateway/config/slack.py)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, field_validator

from gateway.config.fields import SECTION


class _Section(BaseModel):
    # The string under each field is its meaning in docs/configuration.md (gateway/config/reference.py
    # reads it from this source; pydantic's own reading costs every start ~50 ms).
    model_config = SECTION


GroupPolicy = Literal["mention", "open", "off"]
DmPolicy = Literal["pairing", "allowlist", "open", "disabled"]


class ChatChannelConfig(_Section):
    """What every chat platform's section has.

    These keys are documented once for every platform: a `{term}` in a meaning is replaced by the
    platform's own word from its `doc_terms` (gateway/config/reference.py).
    """

    doc_terms: ClassVar[dict[str, str]] = {}

    enabled: bool = False
    """Run this channel in `memgate run`."""
    token: str = ""
    """The bot token (keep it in the env file, e.g. {token_variable})."""
    allow_from: list[str] = []  # user ids (Telegram: or @usernames); ["*"] everyone; [] nobody
    """Who may talk to the bot: {senders}; [] nobody (their ids are logged), [\"*\"] everyone."""
    group_policy: GroupPolicy = "mention"
    """In groups: mention (answer when mentioned or replied to), open (every message) or off."""
    dm_policy: DmPolicy = "pairing"
    """DMs from people not in allow_from: pairing (they get a code an owner approves), allowlist (ignored), open (anyone; needs allow_from ["*"]) or disabled (no DMs at all)."""
    streaming: Literal["on", "off"] = "on"
    """on: replies show while they are written (a draft, or a message edited about once a second); off: each reply arrives whole."""

    @field_validator("allow_from", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        # YAML reads `allow_from: [12345]` as integers; ids are compared as strings.
        return [str(v) for v in value] if isinstance(value, list) else value

    @field_validator("streaming", mode="before")
    @classmethod
    def _on_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `on` / `off` as a boolean.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
