"""Chat commands handled before the model: /new, /stop, /help, /status, /jobs."""

from __future__ import annotations

from dataclasses import dataclass

HELP_TEXT = """\
Commands:
/new — start a fresh conversation (the old one is archived and summarised into memory)
/stop — cancel the answer I am working on (your message is kept)
/status — size of this conversation, what is not yet in memory, and the model in use
/jobs — this chat's scheduled jobs; /jobs cancel ID removes one
/help — this list
/pair CODE — let in someone who was given a pairing code (owners, in a DM with me)"""

COMMANDS = ("new", "stop", "help", "status", "jobs")


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    args: str


def parse_command(text: str) -> Command | None:
    """`/new@mybot extra` → Command("new", "extra"); anything not starting with `/` → None."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2 or stripped[1].isspace():
        return None
    head, *rest = stripped[1:].split(maxsplit=1)
    args = rest[0] if rest else ""
    name = head.split("@", 1)[0].lower()
    if not name.isidentifier():
        return None
    return Command(name, args.strip())


def command_args(text: str) -> str:
    """What follows the command word: `/jobs cancel ab12` → `cancel ab12`."""
    command = parse_command(text)
    return command.args if command is not None else ""


def format_size(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count} B"
