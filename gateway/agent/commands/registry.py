"""Chat commands: the one registry of them, and their parsing.

`/help`, Telegram's command menu and Telegram's `/start` greeting are all generated from `COMMANDS`,
each channel's `/help` listing only the commands that work there, written as they are typed there
(`gateway.bus.typed_command`: Slack's `/memgate new`); the agent dispatches the ones it handles by
name, the channels answer the others (`/pair` in a DM).
Both read a command with `parse_command`, which lives in `channels.base` so the channels can reach
it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from channels.base import parse_command as parse_command  # re-exported: the agent's reading
from gateway.bus import typed_command
from gateway.config.models import CHAT_PLATFORMS

# Where a command is offered: in /help, in Telegram's command menu.
Scope = Literal["help", "menu"]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One chat command: `usage` and `explanation` make its /help line, `description` its menu
    entry; `handler` names who answers it (the agent, or the channel before the agent sees it)."""

    name: str
    description: str
    explanation: str
    scopes: frozenset[Scope]
    handler: Literal["agent", "channel"] = "agent"
    usage: str = ""  # what follows the name in /help, e.g. "CODE"
    # The channels that answer it (None: all); /help elsewhere leaves it out.
    offered_on: frozenset[str] | None = None

    def offered(self, channel: str) -> bool:
        return self.offered_on is None or channel in self.offered_on


_EVERYWHERE: frozenset[Scope] = frozenset({"help", "menu"})

COMMANDS: tuple[CommandSpec, ...] = (
    CommandSpec(
        "new",
        "Start a new session",
        "start a fresh conversation (the old one is archived and summarised into memory)",
        _EVERYWHERE,
    ),
    CommandSpec(
        "stop",
        "Stop the reply in progress",
        "cancel the answer I am working on (your message is kept)",
        _EVERYWHERE,
    ),
    CommandSpec(
        "status",
        "Session and memory status",
        "size of this conversation, what is not yet in memory, and the model in use",
        _EVERYWHERE,
    ),
    CommandSpec(
        "jobs",
        "Scheduled jobs of this chat",
        "this chat's scheduled jobs; /jobs cancel ID removes one",
        _EVERYWHERE,
    ),
    CommandSpec(
        "skills",
        "Skills I can use here",
        "the skills offered in this chat, and why any is unavailable",
        frozenset({"help"}),
    ),
    CommandSpec(
        "tasks",
        "Background tasks of this chat",
        "the background tasks running for this chat (/stop stops them too)",
        frozenset({"help"}),
    ),
    CommandSpec(
        "approve",
        "Run a command I asked about",
        "run the command I asked to run (the owner, in the chat it was asked in)",
        frozenset({"help"}),
        usage="ID",
    ),
    CommandSpec(
        "deny",
        "Refuse a command I asked about",
        "refuse the command I asked to run",
        frozenset({"help"}),
        usage="ID",
    ),
    CommandSpec(
        "memory",
        "What I remember",
        "show MEMORY.md, or with TEXT its lines that hold it (the owner, in a private chat)",
        frozenset({"help"}),
        usage="[TEXT]",
    ),
    CommandSpec(
        "forget",
        "Forget lines of memory",
        "show the lines of memory that hold TEXT, then /forget yes removes them (the owner)",
        frozenset({"help"}),
        usage="TEXT",
    ),
    CommandSpec("help", "What I can do", "this list", _EVERYWHERE),
    CommandSpec(
        "pair",
        "Let in someone with a pairing code",
        "let in someone who was given a pairing code (owners, in a DM with me)",
        frozenset({"help"}),
        handler="channel",
        usage="CODE",
        # Answered in their DMs; the terminal has no one to let in.
        offered_on=frozenset(CHAT_PLATFORMS),
    ),
)

# The commands the agent answers itself; any other `/word` that reaches it is unknown.
AGENT_COMMANDS = frozenset(command.name for command in COMMANDS if command.handler == "agent")


# A command an explanation names, e.g. the `/forget` of "then /forget yes removes them".
_NAMED = re.compile(r"(?<![\w/])/[a-z]+\b")


def _help_line(command: CommandSpec, channel: str = "") -> str:
    """The command's /help line, every command in it written as typed on `channel`."""
    usage = typed_command(channel, f"/{command.name} {command.usage}".rstrip())
    explanation = _NAMED.sub(lambda named: typed_command(channel, named[0]), command.explanation)
    return f"{usage} — {explanation}"


HELP_TEXT = "\n".join(["Commands:", *(_help_line(c) for c in COMMANDS if "help" in c.scopes)])


def help_text(channel: str) -> str:
    """/help on `channel`: the commands offered in help that this channel answers, as typed
    there."""
    lines = (_help_line(c, channel) for c in COMMANDS if "help" in c.scopes and c.offered(channel))
    return "\n".join(["Commands:", *lines])


def command_menu() -> tuple[tuple[str, str], ...]:
    """(name, description) of each command in a platform's menu (Telegram's setMyCommands)."""
    return tuple((c.name, c.description) for c in COMMANDS if "menu" in c.scopes)


def greeting() -> str:
    """What Telegram's `/start` answers: a hello and the menu's commands."""
    names = ", ".join(f"/{name}" for name, _ in command_menu())
    return f"Hi! I'm your memgate assistant: just write to me, or use a command: {names}."


def command_args(text: str) -> str:
    """What follows the command word: `/jobs cancel ab12` → `cancel ab12`."""
    command = parse_command(text)
    return command.args if command is not None else ""
