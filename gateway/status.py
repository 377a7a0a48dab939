"""`memgate status`: what a person needs to see at a glance, secrets masked."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gateway.config import Config
from gateway.jobs import JobError, JobStore, format_time
from memory.failures import FAILURE_REPORT, read_failure_report
from memory.files import MemoryFiles
from memory.sessions import SessionStore, parse_session_bytes


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


def describe(config: Config) -> str:
    files = MemoryFiles(config.workspace, config.tz)
    store = SessionStore(config.workspace / "sessions", config.tz)
    keys = store.keys()
    pending = 0
    for key in keys:
        loaded = parse_session_bytes(store.path_for(key).read_bytes(), key)
        pending += len(loaded.messages) - loaded.last_consolidated
    archive = store.archived_paths()
    archival = 0
    for path in archive:
        loaded = parse_session_bytes(path.read_bytes(), str(path))
        archival += loaded.last_consolidated < len(loaded.messages)
    memory_size = files.memory_md.stat().st_size if files.memory_md.exists() else 0
    history_size = files.history_md.stat().st_size if files.history_md.exists() else 0
    channels = [
        f"  telegram: {'enabled' if config.channels.telegram.enabled else 'disabled'}"
        f" (token {mask(config.channels.telegram.token)}, allow_from {config.channels.telegram.allow_from})",
        f"  discord:  {'enabled' if config.channels.discord.enabled else 'disabled'}"
        f" (token {mask(config.channels.discord.token)}, allow_from {config.channels.discord.allow_from})",
    ]
    return "\n".join(
        [
            f"config:     {config.source}{'' if config.source and config.source.exists() else ' (not found; defaults)'}",
            f"workspace:  {config.workspace}",
            f"state:      {config.state_dir} (inbox journals, search index, lock; out of the model's reach)",
            f"model:      {config.llm.model} at {config.llm.base_url} (key {mask(config.llm.api_key)})",
            f"budget:     {config.llm.budget} prompt tokens",
            "channels:",
            *channels,
            f"sessions:   {len(keys)} live, {len(archive)} archived",
            f"pending:    {pending} messages not yet consolidated in live sessions, "
            f"{archival} archived session(s) awaiting consolidation",
            f"MEMORY.md:  {memory_size} bytes",
            f"HISTORY.md: {history_size} bytes",
            describe_jobs(config),
            *describe_failures(config),
        ]
    )


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
    """The sessions whose consolidation the running gateway last reported as failing."""
    failing = read_failure_report(config.state_dir / FAILURE_REPORT)
    if not failing:
        return ["consolidation: no failures reported"]
    lines = [f"consolidation: {len(failing)} session(s) failing, backing off"]
    for key, entry in sorted(failing.items()):
        at = entry.get("at")
        when = (
            datetime.fromtimestamp(at, config.tz).strftime("%Y-%m-%d %H:%M")
            if isinstance(at, int | float)
            else "?"
        )
        lines.append(
            f"  {key}: {entry.get('failures', '?')} failure(s), last at {when}: "
            f"{entry.get('error', '?')}"
        )
    return lines
