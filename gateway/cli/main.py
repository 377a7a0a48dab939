"""The `memgate` command line: init, setup, run, chat, status, doctor, memory, jobs, pairing,
console, completion.

This module holds the parser (and its shell completion), `run`, `status`, `doctor` and the exit
statuses; the config's first run, `init` and `setup` are gateway/cli/setup.py's, `chat`
gateway/cli/chat.py's, and memory, jobs and pairing gateway/cli/stores.py's.

Exit status: 0 on success, 2 on a usage error (argparse's), 78 on bad configuration (EX_CONFIG,
which the systemd unit does not restart on), 1 on any other error, each with a one-line reason on
stderr; the traceback only with `--debug` or `log_level: DEBUG`. As grep, `memory search` exits 1
when nothing matches. Output into a pipe its reader closed (`| head`) ends quietly, with 0.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from channels.base import ChannelConfigError
from gateway import __version__
from gateway.cli.chat import cmd_chat, quiet_stdout
from gateway.cli.checks import Check, local_checks
from gateway.cli.setup import cmd_init, cmd_setup, config_path, explicit_path
from gateway.collector import collector_paused
from gateway.config.file import load_config, permission_hint, require_api_key
from gateway.config.models import Config
from gateway.errors import ConfigError, MemgateError, describe_errors
from gateway.logs import configure_logging
from gateway.service.control import request, socket_path
from memory.errors import MemoryStoreError

EX_CONFIG = 78

log = logging.getLogger(__name__)


def cmd_doctor(args: argparse.Namespace) -> int:
    # The live checks' timeouts count from here, so the SDKs' import is inside them.
    started = time.monotonic()
    path = config_path(args)
    try:
        config = load_config(path, must_exist=True)
    except ConfigError as exc:
        for problem in str(exc).splitlines():  # a file's problems, one line each
            print(f"✗ config: {problem}")
        return 1
    configure_logging("DEBUG" if args.debug else "ERROR", config.secrets())
    # Each line the moment it is known: these before the live checks' SDKs are imported (a
    # second or more), theirs as each completes.
    print(f"✓ config: {path} is valid", flush=True)
    local = local_checks(config)
    for check in local:
        print(check.line(), flush=True)
    from gateway.cli.doctor import run_checks

    def report(check: Check) -> None:
        print(check.line(), flush=True)

    live = asyncio.run(run_checks(config, report, started))
    return 0 if live and all(check.ok for check in local) else 1


# memory, jobs and pairing (gateway/cli/stores.py) are imported only when one of them runs.
def cmd_pairing(config: Config, args: argparse.Namespace) -> int:
    from gateway.cli.stores import cmd_pairing

    return cmd_pairing(config, args)


def cmd_jobs(config: Config, args: argparse.Namespace) -> int:
    from gateway.cli.stores import cmd_jobs

    return cmd_jobs(config, args)


def cmd_memory(config: Config, args: argparse.Namespace) -> int:
    from gateway.cli.stores import cmd_memory

    return cmd_memory(config, args)


def cmd_skills(config: Config, args: argparse.Namespace) -> int:
    from gateway.cli.skills import cmd_skills

    return cmd_skills(config, args)


def cmd_console(config: Config, args: argparse.Namespace) -> int:
    from gateway.cli.stores import cmd_console

    return cmd_console(config, args)


def load(args: argparse.Namespace, *, runs_channels: bool = True) -> Config:
    return load_config(
        config_path(args), must_exist=explicit_path(args), runs_channels=runs_channels
    )


def cmd_run(args: argparse.Namespace) -> int:
    with collector_paused():
        from gateway.service.run import run_service

    config = load(args)
    configure_logging("DEBUG" if args.debug else config.log_level, config.secrets())
    require_api_key(config)
    return asyncio.run(run_service(config))


def cmd_status(args: argparse.Namespace) -> int:
    from gateway.cli.status import describe, describe_live

    config = load(args, runs_channels=False)
    print(describe(config))
    # Offline and fast: a service that does not answer at once is reported as not running.
    live = asyncio.run(request(socket_path(config.state_dir), {"op": "status"}))
    print(describe_live(live))
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    from gateway.cli.completion import script

    print(script(args.shell), end="")
    return 0


# -- parser -----------------------------------------------------------------------------------------
def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _options(default: object) -> argparse.ArgumentParser:
    """--config and --debug, accepted before and after the subcommand alike.

    After it they default to SUPPRESS, so a subcommand that was not given them keeps what was
    given before it instead of overwriting it with None.
    """
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--config",
        metavar="PATH",
        default=default,
        help="config file (default: $MEMGATE_CONFIG or $MEMGATE_HOME/config.yaml)",
    )
    options.add_argument(
        "--debug",
        action="store_true",
        default=False if default is None else default,
        help="show tracebacks and debug logs",
    )
    return options


def build_parser() -> argparse.ArgumentParser:
    common = _options(argparse.SUPPRESS)
    parser = argparse.ArgumentParser(
        prog="memgate",
        description="Self-hosted gateway between chat platforms and an LLM agent with Markdown memory.",
        epilog="Exit status: 0 ok, 1 error, 2 usage error, 78 configuration error.",
        parents=[_options(None)],
    )
    parser.add_argument("--version", action="version", version=f"memgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, func: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help, description=help, parents=[common])
        command.set_defaults(func=func)
        return command

    def add_loaded(
        name: str, func: Callable[[Config, argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        # memory, jobs and pairing work on files: a channel's token may be unset in this shell.
        return add(name, lambda args: func(load(args, runs_channels=False), args), help)

    add("init", cmd_init, "write the config and workspace templates (never overwrites)")
    add("setup", cmd_setup, "ask for the LLM endpoint, test it, and write it into the config")
    add(
        "doctor",
        cmd_doctor,
        "check the config, folders, model and platforms live; exit 0 if all pass",
    )
    add("run", cmd_run, "run every enabled channel (the service's command)")
    chat = add("chat", cmd_chat, "chat in this terminal")
    chat.add_argument(
        "-m", "--message", metavar="TEXT", help="send one message, print the reply, exit"
    )
    chat.add_argument("--session", metavar="KEY", help="session key (default terminal:local)")
    chat.add_argument(
        "--no-stream", action="store_true", help="print each answer whole, not as it is written"
    )
    chat.add_argument("-v", "--verbose", action="store_true", help="show debug logs")
    add("status", cmd_status, "show configuration, workspace, sessions and memory")
    pairing = add_loaded(
        "pairing", cmd_pairing, "let people in by pairing code: list, approve, reject, revoke"
    )
    steps = pairing.add_subparsers(dest="action", required=True, metavar="ACTION")
    steps.add_parser("list", help="pending codes and approved senders", parents=[common])
    approve = steps.add_parser("approve", help="let in the sender holding CODE", parents=[common])
    approve.add_argument("code", metavar="CODE", help="the code the stranger was given")
    reject = steps.add_parser(
        "reject", help="drop a waiting code, freeing its place", parents=[common]
    )
    which_codes = reject.add_mutually_exclusive_group(required=True)
    which_codes.add_argument("code", nargs="?", metavar="CODE", help="the code to drop")
    which_codes.add_argument("--all", action="store_true", help="every waiting code")
    revoke = steps.add_parser("revoke", help="take an approval back", parents=[common])
    revoke.add_argument("address", metavar="CHANNEL:ID", help="e.g. telegram:123456")

    add_loaded("skills", cmd_skills, "list the skills, their state, and SKILL.md files skipped")
    jobs = add_loaded("jobs", cmd_jobs, "list, remove, pause or resume scheduled jobs")
    jobs.add_argument(
        "action", nargs="?", choices=("list", "remove", "pause", "resume"), help="default: list"
    )
    jobs.add_argument("id", nargs="?", help="the job's id, as `memgate jobs list` shows it")
    memory = add_loaded("memory", cmd_memory, "inspect and manage the memory files")
    actions = memory.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("show", help="print MEMORY.md", parents=[common])
    log_cmd = actions.add_parser("log", help="print HISTORY.md", parents=[common])
    log_cmd.add_argument(
        "-n", "--lines", type=_positive, default=0, metavar="N", help="only the last N entries"
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
        "-n",
        "--limit",
        type=_positive,
        default=10,
        metavar="N",
        help="most hits to show (default 10)",
    )
    search.add_argument("--rebuild", action="store_true", help="rebuild the index from the files")
    console = add_loaded("console", cmd_console, "print the web console's one-time login URL")
    console.add_argument("--open", action="store_true", help="open it in this machine's browser")
    completion = add("completion", cmd_completion, "print the shell completion script")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to load it")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # a shell's completion script asks for the words
        from gateway.cli.completion import answer

        answer(parser)
    args = parser.parse_args(argv)
    if args.debug:
        logging.basicConfig(level=logging.DEBUG)
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
    except BrokenPipeError:
        # `memgate status | head -1`: the reader has all it wanted.
        quiet_stdout()
        code = 0
    except PermissionError as exc:
        log.debug("permission denied", exc_info=True)
        where = Path(exc.filename) if exc.filename else Path.cwd()
        print(f"memgate: {permission_hint(where, 'use')}", file=sys.stderr)
        code = 1
    except Exception as exc:  # the command line's one boundary: any error is one line, exit 1
        log.debug("memgate stopped by an unexpected error", exc_info=True)
        print(f"memgate: {describe_errors(exc)}", file=sys.stderr)  # every error of a group
        code = 1
    except KeyboardInterrupt:
        code = 130
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
    # The collector's passes at exit would walk every object the imports made (two seconds on a
    # busy machine, after the last line) to free what the exit frees anyway.
    gc.freeze()
    sys.exit(code)
