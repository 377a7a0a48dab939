"""`memgate status`: what a person needs to see at a glance, secrets masked."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from channels.inbox import waiting
from channels.pairing import PairingError, PairingStore
from gateway.agent.subagents import describe_listed
from gateway.automation.jobs import JobError, JobStore, format_time
from gateway.config.fields import mask_url
from gateway.config.models import CHAT_PLATFORMS, ChatChannelConfig, Config
from gateway.config.web import describe_web
from gateway.skills.catalog import SkillCatalog
from gateway.skills.prompt import skills_summary
from gateway.state import session_figures_path, token_calibration_path
from gateway.tools.exec import describe as describe_exec
from memory.calibration import TokenCalibration
from memory.consolidation.dedupe import UPDATE_REPORT, describe_updates
from memory.consolidation.failures import FAILURE_REPORT, read_failure_report, read_raw_endings
from memory.files import MemoryFiles
from memory.sessions.figures import FiguresCache
from memory.sessions.store import SessionStore


def mask(secret: str) -> str:
    if not secret:
        return "(not set)"
    return "***" + secret[-4:] if len(secret) > 12 else "***"


def describe_live(live: dict[str, Any] | None) -> str:
    """The running service's own figures, from its control socket."""
    if live is None or "error" in live:
        return "service:    not running (no answer on the control socket)"
    channels = ", ".join(
        f"{name} {'up' if up else 'DOWN'}" for name, up in live.get("channels", {}).items()
    )
    return (
        f"service:    running {_duration(float(live.get('uptime', 0)))}; "
        f"channels {channels or 'none'}; consolidation queue {live.get('queue', 0)}"
    )


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def describe_access(config: Config) -> list[str]:
    """Per channel: the DM policy, owners, approved senders and pending codes."""
    store = PairingStore(config.state_dir)
    try:
        pending, approved = store.pending(), store.approved()
    except PairingError as exc:
        return [f"  access:   {exc}"]
    lines = []
    for name in CHAT_PLATFORMS:
        section: ChatChannelConfig = getattr(config.channels, name)
        owners = [entry for entry in section.allow_from if entry.strip() != "*"]
        everyone = " + everyone as guests" if "*" in section.allow_from else ""
        lines.append(
            f"  {name + ' access:':17} dm_policy {section.dm_policy}, group_policy "
            f"{section.group_policy}; {len(owners)} owner(s){everyone}, "
            f"{sum(a.channel == name for a in approved)} approved, "
            f"{sum(p.channel == name for p in pending)} pending code(s)"
        )
    return lines


def describe(config: Config) -> str:
    files = MemoryFiles(config.workspace, config.tz)
    store = SessionStore(config.workspace / "sessions", config.tz)
    keys = store.keys()
    pending = 0
    owed: dict[str, int] = {}
    interrupted: list[str] = []
    # Each file's figures are cached: a status reads only what was appended since the last one.
    cache = FiguresCache(session_figures_path(config.state_dir))
    for key in keys:
        figures = cache.figures(store.path_for(key))
        pending += figures.pending
        if figures.owed:
            owed[key] = len(figures.owed)
        if figures.interrupted:
            interrupted.append(key)
    archive = store.archived_paths()
    archival = sum(cache.figures(path).pending > 0 for path in archive)
    cache.keep_only({str(store.path_for(key)) for key in keys} | {str(p) for p in archive})
    cache.save()
    memory_size = files.memory_md.stat().st_size if files.memory_md.exists() else 0
    history_size = files.history_md.stat().st_size if files.history_md.exists() else 0
    channels = [
        f"  telegram: {'enabled' if config.channels.telegram.enabled else 'disabled'}"
        f" (token {mask(config.channels.telegram.token)}, allow_from {config.channels.telegram.allow_from})",
        f"  discord:  {'enabled' if config.channels.discord.enabled else 'disabled'}"
        f" (token {mask(config.channels.discord.token)}, allow_from {config.channels.discord.allow_from})",
        f"  matrix:   {'enabled' if config.channels.matrix.enabled else 'disabled'}"
        f" ({config.channels.matrix.user_id or 'no user_id'} on {config.channels.matrix.homeserver},"
        f" allow_from {config.channels.matrix.allow_from})",
        f"  slack:    {'enabled' if config.channels.slack.enabled else 'disabled'}"
        f" (token {mask(config.channels.slack.token)}, app_token"
        f" {mask(config.channels.slack.app_token)}, allow_from {config.channels.slack.allow_from})",
    ]
    return "\n".join(
        [
            f"config:     {config.source}{'' if config.source and config.source.exists() else ' (not found; defaults)'}",
            f"workspace:  {config.workspace}",
            f"state:      {config.state_dir} (inbox journals, search index, lock; out of the model's reach)",
            f"model:      {config.llm.model} at {mask_url(config.llm.base_url)} (key {mask(config.llm.api_key)})",
            describe_budget(config),
            "channels:",
            *channels,
            *describe_access(config),
            f"sessions:   {len(keys)} live, {len(archive)} archived",
            f"pending:    {pending} messages not yet consolidated in live sessions, "
            f"{archival} archived session(s) awaiting consolidation",
            *describe_delivery(owed, interrupted, waiting(config.state_dir)),
            f"MEMORY.md:  {memory_size} bytes",
            f"HISTORY.md: {history_size} bytes",
            describe_mcp(config),
            f"exec:       {describe_exec(config.tools.exec)}",
            f"web:        {describe_web(config.tools.web)}",
            describe_jobs(config),
            f"skills:     {skills_summary(SkillCatalog(config.workspace).current())}",
            describe_listed(config.state_dir),
            *describe_failures(config),
            describe_updates(config.state_dir / UPDATE_REPORT),
        ]
    )


def describe_budget(config: Config) -> str:
    """The prompt budget, and what it is by memgate's count where the server taught a ratio."""
    line = f"budget:     {config.llm.budget} prompt tokens"
    calibration = TokenCalibration(token_calibration_path(config.state_dir), config.llm.model)
    counted = calibration.scaled(config.llm.budget)
    if calibration.learnt and counted != config.llm.budget:
        line += (
            f" ({counted} by memgate's count: the server's tokens are {calibration.ratio:.2f}x "
            f"its count, learnt from {calibration.source})"
        )
    return line


def describe_mcp(config: Config) -> str:
    """How many MCP servers are configured, and which; `memgate doctor` starts them."""
    servers = config.tools.mcp_servers
    enabled = [name for name, server in servers.items() if server.enabled]
    if not servers:
        return "mcp:        no servers configured"
    off = len(servers) - len(enabled)
    names = f" ({', '.join(enabled)})" if enabled else ""
    return f"mcp:        {len(enabled)} server(s) enabled{names}, {off} disabled"


def describe_delivery(
    owed: dict[str, int], interrupted: list[str], received: dict[str, int]
) -> list[str]:
    """Answers stored but not yet taken by their platform, turns a restart stopped half-way, and
    messages received but not finished (in the channels' journals, the turn perhaps not even
    stored); all are finished when the service next starts (or by the running service)."""
    lines = [
        f"delivery:   {sum(owed.values())} answer(s) owed, {len(interrupted)} interrupted turn(s), "
        f"{sum(received.values())} received message(s) not yet answered"
    ]
    lines += [f"  received: {name} ({count})" for name, count in received.items() if count]
    lines += [f"  owed: {key} ({count})" for key, count in sorted(owed.items())]
    lines += [f"  interrupted: {key}" for key in interrupted]
    return lines


def describe_jobs(config: Config) -> str:
    """How many scheduled jobs there are and when the next one is due."""
    try:
        store = JobStore(config.state_dir)
    except JobError as exc:
        return f"jobs:       unreadable ({exc})"
    jobs = store.all()
    paused = sum(1 for job in jobs if job.paused)
    due = store.next_due()
    following = "none due" if due is None else f"next due {format_time(due, config.tz)}"
    return f"jobs:       {len(jobs)} scheduled ({paused} paused), {following}"


def describe_failures(config: Config) -> list[str]:
    """The sessions whose consolidation the gateway last reported as failing, or as ended raw
    (their chunk kept verbatim in HISTORY.md and MEMORY.md not updated) until one succeeds."""
    report = config.state_dir / FAILURE_REPORT
    failing, raw = read_failure_report(report), read_raw_endings(report)
    if not failing and not raw:
        return ["consolidation: no failures reported"]
    lines = []
    if raw:
        lines.append(
            f"consolidation: {len(raw)} session(s) ended raw (chunks kept verbatim in "
            "HISTORY.md, MEMORY.md not updated)"
        )
        for key, entry in sorted(raw.items()):
            lines.append(
                f"  {key}: {entry.get('chunks', '?')} chunk(s), {entry.get('messages', '?')} "
                f"message(s), last at {_when(entry.get('at'), config)}: {entry.get('error') or '?'}"
            )
    if failing:
        lines.append(f"consolidation: {len(failing)} session(s) failing, backing off")
    for key, entry in sorted(failing.items()):
        lines.append(
            f"  {key}: {entry.get('failures', '?')} failure(s), last at "
            f"{_when(entry.get('at'), config)}: {entry.get('error', '?')}"
        )
    return lines


def _when(at: object, config: Config) -> str:
    if not isinstance(at, int | float):
        return "?"
    return datetime.fromtimestamp(at, config.tz).strftime("%Y-%m-%d %H:%M")
