"""The one command registry: /help, Telegram's menu and /start are generated from it."""

from __future__ import annotations

import pytest

from channels.base import Command
from gateway.agent.commands.registry import (
    AGENT_COMMANDS,
    COMMANDS,
    HELP_TEXT,
    command_menu,
    greeting,
    help_text,
    parse_command,
)


def test_help_lists_every_help_command_once_in_registry_order() -> None:
    """Each command offered in /help has one line, in the registry's order, usage included."""
    lines = HELP_TEXT.splitlines()
    assert lines[0] == "Commands:"
    offered = [c for c in COMMANDS if "help" in c.scopes]
    assert [line.split(" — ")[0] for line in lines[1:]] == [
        f"/{c.name} {c.usage}".rstrip() for c in offered
    ]
    assert "/pair CODE — let in someone who was given a pairing code" in HELP_TEXT


def test_pair_is_in_help_where_a_channel_answers_it() -> None:
    """/pair is listed on every chat platform, whose DMs answer it (Matrix's too), never in the
    terminal, where there is no one to let in."""
    for channel in ("telegram", "discord", "slack", "matrix"):
        assert "pair CODE — let in someone" in help_text(channel), channel
    assert "pair CODE" not in help_text("terminal")


def test_menu_and_greeting_name_the_same_commands() -> None:
    """Telegram's menu and the /start greeting list the menu commands; /pair is in neither."""
    names = [name for name, _ in command_menu()]
    assert names == ["new", "stop", "status", "jobs", "help"]
    assert all(len(text) <= 256 for _, text in command_menu())  # Telegram's limit
    assert greeting().endswith(", ".join(f"/{name}" for name in names) + ".")
    assert "/pair" not in greeting()


def test_the_agent_answers_only_its_own_commands() -> None:
    """/pair is answered by the channels, so it is not one of the agent's commands."""
    assert {"new", "stop", "status", "jobs", "tasks", "approve", "deny", "help"} <= AGENT_COMMANDS
    assert "pair" not in AGENT_COMMANDS


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("/pair KX7P4M2Q", Command("pair", "KX7P4M2Q")),
        ("/Pair kx7p4m2q", Command("pair", "kx7p4m2q")),
        ("/START", Command("start", "")),
        ("/Start@Memgate_Bot", Command("start", "")),
        ("  /jobs@memgate_bot cancel ab12 ", Command("jobs", "cancel ab12")),
        ("/help\nmore", Command("help", "more")),
        ("hello /new", None),
        ("/ new", None),
        ("/", None),
        ("/1x", None),
    ],
)
def test_one_parser_reads_any_capitalisation_and_a_bot_suffix(
    text: str, command: Command | None
) -> None:
    """A command's name is read in lower case without `@bot`; its argument is kept as typed."""
    assert parse_command(text) == command
