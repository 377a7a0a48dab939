"""The `memgate` command line (SPEC §7): init, run, chat, status, memory.

Exit status: 0 on success, 78 on bad configuration (EX_CONFIG, which the systemd unit does not
restart on), 1 on any other error, each with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from channels.base import ChannelConfigError
from gateway import __version__
from gateway.config import (
    Config,
    default_config_path,
    default_workspace,
    load_config,
    memgate_home,
    render_config,
    write_private,
)
from gateway.errors import ConfigError, MemgateError
from gateway.logs import configure_logging
from gateway.templates import WORKSPACE_FILES
from memory.errors import MemoryStoreError
from memory.fileio import create_exclusive
from memory.files import MEMORY_TEMPLATE, MemoryFiles
from memory.search import format_hits, terminal_progress

EX_CONFIG = 78

log = logging.getLogger(__name__)


class UsageError(MemgateError):
    """A command was given arguments it cannot use."""


# -- config location and first run ------------------------------------------------------------------
def config_path(args: argparse.Namespace) -> Path:
    given = getattr(args, "config", None)
    return Path(given).expanduser() if given else default_config_path()


def _llm_configured(path: Path) -> bool:
    return path.exists() or bool(os.environ.get("OPENAI_API_KEY"))


def first_run(path: Path) -> None:
    """Ask for the LLM endpoint on a terminal and write the config; without one, exit 78."""
    if not sys.stdin.isatty():
        raise ConfigError(
            f"no LLM configured: {path} does not exist. Run `memgate init` and set llm.api_key "
            f"there (or export OPENAI_API_KEY), or start `memgate chat` on a terminal to be asked",
            path=str(path),
            key="llm.api_key",
        )
    print(f"No configuration yet; let's write {path}. Press Enter to keep a default.\n")
    base_url = input("LLM endpoint (OpenAI-compatible) [https://api.openai.com/v1]: ").strip()
    env_key = os.environ.get("OPENAI_API_KEY")
    hint = "[from OPENAI_API_KEY]" if env_key else "[none]"
    api_key = getpass.getpass(f"API key {hint}: ").strip()
    model = input("Model [gpt-4o-mini]: ").strip()
    text = render_config(
        workspace=default_workspace(),
        base_url=base_url or "https://api.openai.com/v1",
        api_key=api_key or ("${OPENAI_API_KEY}" if env_key else ""),
        model=model or "gpt-4o-mini",
    )
    write_private(path, text)
    write_templates(default_workspace())
    print(f"\nWrote {path} (readable only by you) and the workspace {default_workspace()}.")
    print("Edit AGENTS.md, SOUL.md and USER.md there to shape the assistant.\n")


def load(args: argparse.Namespace) -> Config:
    return load_config(config_path(args))


# -- commands ---------------------------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    path = config_path(args)
    created, kept = [], []
    if path.exists():
        kept.append(path)
    else:
        write_private(path, render_config(workspace=default_workspace()))
        created.append(path)
    config = load_config(path, env={**os.environ, "OPENAI_API_KEY": "unset"})
    new, old = write_templates(config.workspace)
    created += new
    kept += old
    for item in created:
        print(f"created  {item}")
    for item in kept:
        print(f"kept     {item} (already there)")
    print(f"\nNext: set llm.api_key in {path} (or export OPENAI_API_KEY), then `memgate chat`.")
    return 0


def write_templates(workspace: Path) -> tuple[list[Path], list[Path]]:
    """Write the workspace templates that are missing; return (created, kept)."""
    created, kept = [], []
    files = {**WORKSPACE_FILES, "memory/MEMORY.md": MEMORY_TEMPLATE}
    for name, text in files.items():
        target = workspace / name
        if target.exists():
            kept.append(target)
            continue
        try:
            create_exclusive(target, text)
        except FileExistsError:
            kept.append(target)
            continue
        created.append(target)
    for sub in ("sessions", "media"):
        (workspace / sub).mkdir(parents=True, exist_ok=True)
    return created, kept


def cmd_chat(args: argparse.Namespace) -> int:
    from channels.terminal import TerminalChannel
    from gateway.app import open_runtime

    path = config_path(args)
    if not _llm_configured(path):
        first_run(path)
    config = load_config(path)
    configure_logging("DEBUG" if args.verbose else "WARNING", config.secrets())

    async def chat() -> int:
        async with open_runtime(config) as runtime:
            terminal = TerminalChannel(
                runtime.agent.handle,
                session_key=args.session,
                history_path=memgate_home() / "chat_history",
            )
            if args.message is not None:
                print(await terminal.ask(args.message))
                return 0
            print(
                f"memgate {__version__} · model {config.llm.model} · /help for commands, Ctrl-D to quit"
            )
            await terminal.run()
            return 0

    return asyncio.run(chat())


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.service import run_service

    config = load(args)
    configure_logging(config.log_level, config.secrets())
    return asyncio.run(run_service(config))


def cmd_status(args: argparse.Namespace) -> int:
    from gateway.status import describe

    config = load(args)
    print(describe(config))
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    config = load(args)
    files = MemoryFiles(config.workspace, config.tz)
    action = args.action
    if action == "show":
        print(files.read_memory(), end="")
    elif action == "log":
        history = files.read_history()
        if args.lines:
            entries = [e for e in history.split("\n\n") if e.strip()]
            history = "\n\n".join(entries[-args.lines :]) + ("\n" if entries else "")
        print(history or "(HISTORY.md is empty)", end="" if history else "\n")
    elif action == "restore":
        return _restore(files, args.version)
    elif action == "consolidate":
        return asyncio.run(_consolidate(config, args.session, args.all))
    elif action == "search":
        return asyncio.run(_search(config, " ".join(args.query), args.limit, args.rebuild))
    return 0


async def _search(config: Config, query: str, limit: int, rebuild: bool) -> int:
    """Print the best hits; the index is built or brought up to date first (progress on a tty)."""
    from gateway.app import open_search

    configure_logging("WARNING", config.secrets())  # an embeddings failure is worth a line
    progress = terminal_progress(sys.stderr) if sys.stderr.isatty() else None
    async with open_search(config) as search:
        await (search.rebuild(progress) if rebuild else search.refresh(progress))
        hits = await search.search(query, limit)
    print(format_hits(hits, color=sys.stdout.isatty()) if hits else f"no matches for {query!r}")
    return 0


async def _consolidate(config: Config, key: str | None, everything: bool) -> int:
    """Consolidate one session or all of them now, with a progress line on a terminal."""
    from gateway.app import open_runtime
    from memory.consolidate import Job

    configure_logging("WARNING", config.secrets())
    async with open_runtime(config) as runtime:
        consolidator = runtime.consolidator
        keys = runtime.sessions.keys() if everything else [key or ""]
        if key and not runtime.sessions.path_for(key).exists():
            raise UsageError(f"no session {key!r} in {runtime.sessions.root}")
        if sys.stderr.isatty():
            consolidator.progress = _progress_line
        for name in keys:
            consolidator.enqueue(Job(name, name, everything=True))
        await consolidator.wait_idle()
        if sys.stderr.isatty():
            print(file=sys.stderr)
        pending = 0
        for name in keys:
            session = await runtime.sessions.get(name)
            pending += session.unconsolidated
    print(f"consolidated {len(keys)} session(s); {pending} message(s) still pending")
    return 0 if pending == 0 else 1


def _progress_line(key: str, done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    bar = "#" * filled + "." * (width - filled)
    print(f"\r{key[:30]:30} [{bar}] {done}/{total} messages", end="", file=sys.stderr, flush=True)


def _restore(files: MemoryFiles, version: str | None) -> int:
    versions = files.list_versions()
    if version is None:
        if not versions:
            print("No previous versions of MEMORY.md are kept yet.")
            return 0
        print("Kept versions of MEMORY.md, oldest first:")
        for path in versions:
            print(f"  {path.name}  ({path.stat().st_size} bytes)")
        print("\nRestore one with `memgate memory restore NAME` (or `latest`).")
        return 0
    chosen = files.restore(None if version == "latest" else version)
    print(f"Restored MEMORY.md from {chosen.name}; the text it replaced is kept in versions/.")
    return 0


# -- parser -----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        help="config file (default: $MEMGATE_CONFIG or $MEMGATE_HOME/config.yaml)",
    )
    parser = argparse.ArgumentParser(
        prog="memgate",
        description="Self-hosted gateway between chat platforms and an LLM agent with Markdown memory.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"memgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, func: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help, description=help, parents=[common])
        command.set_defaults(func=func)
        return command

    add("init", cmd_init, "write the config and workspace templates (never overwrites)")
    add("run", cmd_run, "run every enabled channel (the service's command)")
    chat = add("chat", cmd_chat, "chat in this terminal")
    chat.add_argument(
        "-m", "--message", metavar="TEXT", help="send one message, print the reply, exit"
    )
    chat.add_argument("--session", metavar="KEY", help="session key (default terminal:local)")
    chat.add_argument("-v", "--verbose", action="store_true", help="show debug logs")
    add("status", cmd_status, "show configuration, workspace, sessions and memory")
    memory = add("memory", cmd_memory, "inspect and manage the memory files")
    actions = memory.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("show", help="print MEMORY.md", parents=[common])
    log_cmd = actions.add_parser("log", help="print HISTORY.md", parents=[common])
    log_cmd.add_argument(
        "-n", "--lines", type=int, default=0, metavar="N", help="only the last N entries"
    )
    restore = actions.add_parser(
        "restore", help="list kept versions of MEMORY.md, or restore one", parents=[common]
    )
    restore.add_argument("version", nargs="?", help="a version's file name, or 'latest'")
    consolidate = actions.add_parser(
        "consolidate", help="consolidate sessions into memory now", parents=[common]
    )
    which = consolidate.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", metavar="KEY", help="one session, e.g. telegram:42")
    which.add_argument("--all", action="store_true", help="every live session")
    search = actions.add_parser(
        "search", help="search memory and past conversations", parents=[common]
    )
    search.add_argument("query", nargs="+", help='keywords; "quoted words" must appear together')
    search.add_argument(
        "-n", "--limit", type=int, default=10, metavar="N", help="most hits to show (default 10)"
    )
    search.add_argument("--rebuild", action="store_true", help="rebuild the index from the files")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except ConfigError as exc:
        print(f"memgate: configuration error: {exc}", file=sys.stderr)
        code = EX_CONFIG
    except (MemgateError, MemoryStoreError) as exc:
        print(f"memgate: {exc}", file=sys.stderr)
        code = 1
    except ChannelConfigError as exc:
        # The platform refused the token or a setting: restarting would not help.
        print(f"memgate: configuration error: {exc}", file=sys.stderr)
        code = EX_CONFIG
    except Exception as exc:
        log.exception("memgate stopped by an unexpected error")
        print(f"memgate: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
