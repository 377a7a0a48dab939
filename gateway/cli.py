"""The `memgate` command line: init, setup, run, chat, status, doctor, memory, pairing.

Exit status: 0 on success, 2 on a usage error (argparse's), 78 on bad configuration (EX_CONFIG,
which the systemd unit does not restart on), 1 on any other error, each with a one-line reason on
stderr; the traceback only with `--debug` or `log_level: DEBUG`.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from channels.base import ChannelConfigError
from channels.pairing import PairingError, PairingStore
from gateway import __version__
from gateway.bus import Handler
from gateway.clock import SystemClock
from gateway.config import (
    OPENAI_URL,
    Config,
    default_config_path,
    default_workspace,
    load_config,
    memgate_home,
    parse_config,
    permission_hint,
    render_config,
    require_api_key,
    update_llm_section,
    write_private,
)
from gateway.control import is_serving, remote_handler, request, socket_path
from gateway.errors import ConfigError, MemgateError
from gateway.job_tools import JobTools
from gateway.jobs import JobError, JobStore
from gateway.lock import WorkspaceLock
from gateway.logs import configure_logging
from gateway.scheduler import Scheduler
from gateway.templates import WORKSPACE_FILES
from memory.errors import MemoryStoreError
from memory.fileio import FILE_MODE, create_exclusive, ensure_private_dir
from memory.files import MEMORY_TEMPLATE, MemoryFiles
from memory.search_display import format_hits, terminal_progress

EX_CONFIG = 78

log = logging.getLogger(__name__)


class UsageError(MemgateError):
    """A command was given arguments it cannot use."""


# -- config location and first run ------------------------------------------------------------------
def config_path(args: argparse.Namespace) -> Path:
    given = getattr(args, "config", None)
    return Path(given).expanduser() if given else default_config_path()


def _explicit(args: argparse.Namespace) -> bool:
    """A path given with --config must exist: a typo must not run on the defaults."""
    return getattr(args, "config", None) is not None


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
    base_url, api_key, model = ask_llm(OPENAI_URL, "", "gpt-4o-mini")
    if api_key is None:
        api_key = "${OPENAI_API_KEY}" if os.environ.get("OPENAI_API_KEY") else ""
    text = render_config(
        workspace=default_workspace(), base_url=base_url, api_key=api_key, model=model
    )
    write_private(path, text)
    write_templates(default_workspace())
    print(f"\nWrote {path} (readable only by you) and the workspace {default_workspace()}.")
    print("Edit AGENTS.md, SOUL.md and USER.md there to shape the assistant.\n")


def ask_llm(base_url: str, api_key: str, model: str) -> tuple[str, str | None, str]:
    """Ask endpoint, key and model (Enter keeps the value shown), test them with one call, and
    offer to answer again while the test fails. Returns the values to write; the key is None when
    none was typed, so the file keeps what it had (a `${VAR}` stays a reference, not the secret)."""
    typed: str | None = None
    from gateway.doctor import check_llm

    while True:
        base_url = input(f"LLM endpoint (OpenAI-compatible) [{base_url}]: ").strip() or base_url
        env_key = os.environ.get("OPENAI_API_KEY")
        hint = (
            "[keep the current one]"
            if api_key
            else "[from OPENAI_API_KEY]"
            if env_key
            else "[none]"
        )
        typed = getpass.getpass(f"API key {hint}: ").strip() or typed
        tested = typed or api_key or ("${OPENAI_API_KEY}" if env_key else "")
        model = input(f"Model [{model}]: ").strip() or model
        raw = {
            "workspace": str(default_workspace()),
            "llm": {
                "base_url": base_url,
                "api_key": tested,
                "model": model,
                "max_retries": 0,
                "timeout": 20,
            },
        }
        try:
            check = asyncio.run(check_llm(parse_config(raw, Path("(answers)"))))
            ok, detail = check.ok, check.detail
        except ConfigError as exc:
            ok, detail = False, str(exc).removeprefix("(answers): ")
        print(f"{'✓' if ok else '✗'} {detail}")
        if ok:
            return base_url, typed, model
        again = input("Fix the answers? [Y/n] (n writes them as they are): ").strip().lower()
        if again in ("n", "no"):
            return base_url, typed, model


def cmd_setup(args: argparse.Namespace) -> int:
    """The first-run questions again, on an existing config (other keys kept)."""
    path = config_path(args)
    if not sys.stdin.isatty():
        raise UsageError("`memgate setup` asks questions: run it on a terminal")
    if not path.exists():
        first_run(path)
        return 0
    current = load_config(path)
    print(f"Updating the llm section of {path}. Press Enter to keep a value.\n")
    base_url, api_key, model = ask_llm(current.llm.base_url, current.llm.api_key, current.llm.model)
    update_llm_section(path, base_url, api_key, model)
    print(f"\nWrote {path}; every other key is as it was.")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from gateway.doctor import run_checks

    path = config_path(args)
    try:
        config = load_config(path, must_exist=True)
    except ConfigError as exc:
        print(f"✗ config: {exc}")
        return 1
    configure_logging("DEBUG" if args.debug else "ERROR", config.secrets())
    print(f"✓ config: {path} is valid")

    async def checks() -> bool:
        passed = True
        async for check in run_checks(config):
            print(check.line(), flush=True)
            passed = passed and check.ok
        return passed

    return 0 if asyncio.run(checks()) else 1


def load(args: argparse.Namespace) -> Config:
    return load_config(config_path(args), must_exist=_explicit(args))


# -- commands ---------------------------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    path = config_path(args)
    created, kept = [], []
    if path.exists():
        kept.append(path)
    else:
        write_private(path, render_config(workspace=default_workspace()))
        created.append(path)
    # init needs only the workspace path. The secrets' variables come later (the env file of a
    # service, an export), so an unset one must not stop it, whichever channel is enabled.
    config = load_config(path, secret_stand_in="unset")
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
        except FileExistsError:  # created meanwhile: it is someone's, keep it
            kept.append(target)
            continue
        created.append(target)
    for sub in ("sessions", "media", "groups"):
        ensure_private_dir(workspace / sub)
    return created, kept


def cmd_chat(args: argparse.Namespace) -> int:
    from channels.terminal import TerminalChannel
    from gateway.app import open_runtime

    path = config_path(args)
    if not _explicit(args) and not _llm_configured(path):
        first_run(path)
    config = load_config(path, must_exist=_explicit(args))
    debug = args.verbose or args.debug
    configure_logging("DEBUG" if debug else "WARNING", config.secrets())
    if not debug:
        # On a terminal the reply itself names a model failure; the log line would say it twice.
        logging.getLogger("gateway.agent").setLevel(logging.ERROR)
    socket = socket_path(config.state_dir)
    key = args.session or "terminal:local"

    async def remote_owed() -> list[str]:
        answer = await request(socket, {"op": "owed", "session": key})
        return list(answer.get("texts") or []) if answer else []

    async def talk(handler: Handler, where: str, owed: Callable[[], Awaitable[list[str]]]) -> int:
        terminal = TerminalChannel(
            handler, session_key=args.session, history_path=chat_history_path(config)
        )
        if args.message is not None:
            for text in await owed():
                print(f"(kept from before a restart)\n{text}\n")
            reply = await handler(terminal.inbound(args.message))
            if reply is not None:
                await reply.sent()
            if reply is not None and reply.failed:
                print(f"memgate: {reply.text}", file=sys.stderr)
                return 1
            print(reply.text if reply is not None else "")
            return 0
        print(f"memgate {__version__} · model {config.llm.model} · {where} · /help, Ctrl-D to quit")
        # Answers a restart kept from this terminal (stored, never shown) come first.
        for text in await owed():
            print(f"\n(kept from before a restart)\n{text}\n", flush=True)
        await terminal.run()
        return 0

    async def chat() -> int:
        if await is_serving(socket):
            # The service holds the workspace: talk to its agent, memory and sessions.
            return await talk(
                remote_handler(socket), "attached to the running service", remote_owed
            )
        require_api_key(config)
        async with open_runtime(config) as runtime:

            async def local_owed() -> list[str]:
                texts = []
                for reply in await runtime.agent.owed("terminal", "local", key):
                    texts.append(reply.text)
                    await reply.sent()
                return texts

            return await talk(runtime.agent.handle, "in this process", local_owed)

    return asyncio.run(chat())


def chat_history_path(config: Config) -> Path:
    """The terminal's line history, in the state folder; an older `~/.memgate/chat_history` moves."""
    path = config.state_dir / "chat_history"
    old = memgate_home() / "chat_history"
    if old.is_file() and not path.exists():
        ensure_private_dir(path.parent)
        shutil.move(old, path)
        os.chmod(path, FILE_MODE)
    return path


def cmd_run(args: argparse.Namespace) -> int:
    from gateway.service import run_service

    config = load(args)
    configure_logging("DEBUG" if args.debug else config.log_level, config.secrets())
    require_api_key(config)
    return asyncio.run(run_service(config))


def cmd_status(args: argparse.Namespace) -> int:
    from gateway.status import describe, describe_live

    config = load(args)
    print(describe(config))
    # Offline and fast: a service that does not answer at once is reported as not running.
    live = asyncio.run(request(socket_path(config.state_dir), {"op": "status"}))
    print(describe_live(live))
    return 0


def cmd_pairing(args: argparse.Namespace) -> int:
    """List, approve and revoke; a running service reads the change on its next message."""
    config = load(args)
    store = PairingStore(config.state_dir)
    try:
        if args.action == "approve":
            approved = store.approve(args.code, "cli")
            print(
                f"approved {approved.address} ({approved.name or 'no name'}); "
                "their next message is answered"
            )
        elif args.action == "revoke":
            revoked = store.revoke(args.address)
            print(f"revoked {revoked.address}; their next message goes unanswered")
        else:
            print(_pairing_table(store))
    except PairingError as exc:
        raise MemgateError(str(exc)) from exc
    return 0


def _pairing_table(store: PairingStore) -> str:
    lines = ["pending codes (valid for an hour; `memgate pairing approve CODE`):"]
    lines += [
        f"  {p.code}  {p.channel}:{p.sender_id}  {p.name or '-'}  asked {_when(p.created_at)}"
        for p in store.pending()
    ] or ["  (none)"]
    lines.append("approved senders (`memgate pairing revoke CHANNEL:ID`):")
    lines += [
        f"  {a.address}  {a.name or '-'}  by {a.approved_by} {_when(a.approved_at)}"
        for a in store.approved()
    ] or ["  (none)"]
    return "\n".join(lines)


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


def cmd_jobs(args: argparse.Namespace) -> int:
    """List or change scheduled jobs: through the running service, else in the job file."""
    config = load(args)
    action, job_id = args.action or "list", args.id or ""
    if action != "list" and not job_id:
        print(f"memgate: jobs {action} needs a job id (see memgate jobs list)", file=sys.stderr)
        return 2
    socket = socket_path(config.state_dir)
    answer = asyncio.run(request(socket, {"op": "jobs", "action": action, "id": job_id}))
    if answer is not None and "error" not in answer:
        done, text = bool(answer.get("ok")), str(answer.get("text", ""))
    else:
        done, text = _jobs_offline(config, action, job_id)
    print(text, file=sys.stdout if done else sys.stderr)
    return 0 if done else 1


def _jobs_offline(config: Config, action: str, job_id: str) -> tuple[bool, str]:
    lock = WorkspaceLock(config.workspace, config.state_dir)
    if action != "list":
        # A `memgate chat` holding the lock keeps the jobs in memory and would write over us.
        lock.acquire()
    try:
        try:
            store = JobStore(config.state_dir)
        except JobError as exc:
            raise MemgateError(str(exc)) from exc
        scheduler = Scheduler(store, SystemClock(), config.tz, config.automation.grace)
        return JobTools(scheduler, config.tz).operate(action, job_id)
    finally:
        if action != "list":
            lock.release()


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
    chat.add_argument("-v", "--verbose", action="store_true", help="show debug logs")
    add("status", cmd_status, "show configuration, workspace, sessions and memory")
    pairing = add("pairing", cmd_pairing, "let people in by pairing code: list, approve, revoke")
    steps = pairing.add_subparsers(dest="action", required=True, metavar="ACTION")
    steps.add_parser("list", help="pending codes and approved senders", parents=[common])
    approve = steps.add_parser("approve", help="let in the sender holding CODE", parents=[common])
    approve.add_argument("code", metavar="CODE", help="the code the stranger was given")
    revoke = steps.add_parser("revoke", help="take an approval back", parents=[common])
    revoke.add_argument("address", metavar="CHANNEL:ID", help="e.g. telegram:123456")

    jobs = add("jobs", cmd_jobs, "list, remove, pause or resume scheduled jobs")
    jobs.add_argument(
        "action", nargs="?", choices=("list", "remove", "pause", "resume"), help="default: list"
    )
    jobs.add_argument("id", nargs="?", help="the job's id, as `memgate jobs list` shows it")
    memory = add("memory", cmd_memory, "inspect and manage the memory files")
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
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
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
        _quiet_stdout()
        code = 0
    except PermissionError as exc:
        log.debug("permission denied", exc_info=True)
        where = Path(exc.filename) if exc.filename else Path.cwd()
        print(f"memgate: {permission_hint(where, 'use')}", file=sys.stderr)
        code = 1
    except Exception as exc:
        log.debug("memgate stopped by an unexpected error", exc_info=True)
        print(f"memgate: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
    sys.exit(code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush has no pipe to break."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
