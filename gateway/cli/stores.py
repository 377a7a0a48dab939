"""The `memgate` subcommands over what the gateway keeps: memory, scheduled jobs and pairings, and
the web console's login.

Each takes the loaded configuration and the parsed arguments, and returns the exit status; the
command line (gateway/cli/main.py) loads the config and maps errors to exit statuses.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime

from channels.pairing import PairingError, PairingStore, Pending
from gateway.automation.clock import SystemClock
from gateway.automation.jobs import JobError, JobStore
from gateway.automation.scheduler import Scheduler
from gateway.config.fields import parse_listen
from gateway.config.file import require_api_key
from gateway.config.models import Config
from gateway.errors import ConfigError, MemgateError, UsageError
from gateway.logs import configure_logging
from gateway.service.control import request, socket_path
from gateway.service.lock import WorkspaceLock
from gateway.tools.jobs import JobTools
from memory.files import MemoryFiles
from memory.search.display import format_hits, terminal_progress


def cmd_pairing(config: Config, args: argparse.Namespace) -> int:
    """List, approve, reject and revoke in the pairing file, which a running service reads under
    its lock on every stranger's message: the change holds from their next message on."""
    store = PairingStore(config.state_dir)
    try:
        if args.action == "approve":
            approved = store.approve(args.code, "cli")
            print(
                f"approved {approved.address} ({approved.name or 'no name'}); "
                "their next message is answered"
            )
        elif args.action == "reject":
            codes = store.reject_all() if args.all else [store.reject(args.code)]
            print(_rejected(codes, every=args.all))
        elif args.action == "revoke":
            revoked = store.revoke(args.address)
            print(f"revoked {revoked.address}; their next message goes unanswered")
        else:
            print(_pairing_table(store))
    except PairingError as exc:
        raise MemgateError(str(exc)) from exc
    return 0


def _rejected(codes: list[Pending], *, every: bool) -> str:
    if not codes:
        return "no pairing codes were waiting"
    if every:
        who = ", ".join(f"{p.code} ({p.channel}:{p.sender_id})" for p in codes)
        head = f"rejected {len(codes)} pairing code(s): {who}"
    else:
        [one] = codes
        head = f"rejected {one.code} ({one.channel}:{one.sender_id}, {one.name or 'no name'})"
    return f"{head}; no new code for them for an hour, and the next stranger can get one now"


def _pairing_table(store: PairingStore) -> str:
    lines = ["pending codes (valid for an hour; `memgate pairing approve|reject CODE`):"]
    lines += [
        f"  {p.code}  {p.channel}:{p.sender_id}  {p.name or '-'}  asked {_when(p.created_at)}"
        for p in store.pending()
    ] or ["  (none)"]
    lines.append("approved senders (`memgate pairing revoke CHANNEL:ID`):")
    lines += [
        f"  {a.address}  {a.name or '-'}  by {a.approved_by} {_when(a.approved_at)}"
        for a in store.approved()
    ] or ["  (none)"]
    held = store.rejected()
    if held:
        lines.append("rejected (no new code for an hour after):")
        lines += [f"  {r.address}  {r.name or '-'}  {_when(r.rejected_at)}" for r in held]
    return "\n".join(lines)


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


def cmd_jobs(config: Config, args: argparse.Namespace) -> int:
    """List or change scheduled jobs: through the running service, else in the job file."""
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


def cmd_memory(config: Config, args: argparse.Namespace) -> int:
    """Show, search, consolidate and restore the memory files."""
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
    from gateway.tools.search import open_search

    configure_logging("WARNING", config.secrets())  # an embeddings failure is worth a line
    progress = terminal_progress(sys.stderr) if sys.stderr.isatty() else None
    async with open_search(config) as search:
        await (search.rebuild(progress) if rebuild else search.refresh(progress))
        hits = await search.search(query, limit)
    if not hits:
        print(f"no matches for {query!r}", file=sys.stderr)
        return 1  # as grep: a script can tell "nothing found" from a hit
    print(format_hits(hits, color=sys.stdout.isatty()))
    return 0


async def _consolidate(config: Config, key: str | None, everything: bool) -> int:
    """Consolidate one session or all of them now, with a progress line on a terminal."""
    from gateway.service.app import open_runtime
    from memory.consolidation.consolidator import Job

    configure_logging("WARNING", config.secrets())
    require_api_key(config)  # every chunk is a model call: no key for OpenAI's URL is exit 78 now
    # Consolidation calls no tool: on demand, no MCP server starts (nor is the SDK loaded).
    async with open_runtime(config, mcp_on_demand=True) as runtime:
        consolidator = runtime.consolidator
        keys = runtime.sessions.keys() if everything else [key or ""]
        if key and not runtime.sessions.path_for(key).exists():
            raise UsageError(f"no session {key!r} in {runtime.sessions.root}")
        bar = _ProgressLine() if sys.stderr.isatty() else None
        consolidator.progress = bar
        for name in keys:
            consolidator.enqueue(Job(name, name, everything=True))
        await consolidator.wait_idle()
        if bar is not None:
            bar.close()
        pending = 0
        for name in keys:
            session = await runtime.sessions.get(name)
            pending += session.unconsolidated
        raw = sorted(set(keys) & set(consolidator.ended_raw))
    # A chunk kept raw is off the pending count but never reached MEMORY.md: not a success.
    done = f"consolidated {len(keys) - len(raw)} session(s)"
    if raw:
        done += f"; {len(raw)} session(s) ended raw ({', '.join(raw)}; see memgate status)"
    print(f"{done}; {pending} message(s) still pending")
    return 0 if pending == 0 and not raw else 1


class _ProgressLine:
    """A session's bar over its pending messages, redrawn in place; a finished one keeps its line."""

    width = 30

    def __init__(self) -> None:
        self.open = False  # a bar is drawn without its newline yet

    def __call__(self, key: str, done: int, total: int) -> None:
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        self.open = done < total
        end = "" if self.open else "\n"
        line = f"\r{key[:30]:30} [{bar}] {done}/{total} messages"
        print(line, end=end, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.open:
            print(file=sys.stderr)


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


def cmd_console(config: Config, args: argparse.Namespace) -> int:
    """Print (or open) the web console's login URL: good for one login within ten minutes."""
    from gateway.console.keys import console_secret, login_ticket

    listen = config.console.listen
    if not listen:
        raise ConfigError(
            f"{config.source}: console.listen is not set; set it (e.g. 127.0.0.1:8766) and "
            "restart memgate run",
            path=str(config.source),
            key="console.listen",
        )
    host, port = parse_listen(listen)
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"  # listening everywhere: loopback is one of its names
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/login?ticket={login_ticket(console_secret(config.state_dir))}"
    print(url)
    print(
        "One login, within ten minutes, while memgate run serves the console. From another "
        f"machine: ssh -L {port}:{shown}:{port} THIS_HOST, then open the URL there.",
        file=sys.stderr,
    )
    if not _answers(host, port):
        print(
            f"Nothing answers at {shown}:{port} now: start memgate run (or restart it if "
            "console.listen was set since it started); the URL works once it serves the console.",
            file=sys.stderr,
        )
    if args.open:
        import webbrowser

        webbrowser.open(url)
    return 0


def _answers(host: str, port: int) -> bool:
    """Whether something accepts a connection at host:port within a second."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
