"""`memgate run`: every enabled channel, the agent and the consolidator in one process.

One exit stack owns the resources and one task group the long-lived tasks (STYLE "Async"). SIGTERM or
SIGINT sets a stop event; then channels stop first (no new input; running turns get
`shutdown_grace` to answer), then the health endpoint, then memory (consolidation gets its grace).
SIGHUP reloads who may talk to the bot (gateway/service/access.py) without a restart.

Each channel's module (and its SDK) and the health endpoint's web server are imported only when
the config enables them: a Telegram-only gateway never loads discord.py.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext, suppress
from typing import TYPE_CHECKING, Any

from channels.base import Channel, ChatCommands
from channels.pairing import PairingStore
from gateway.agent.commands.registry import command_menu, greeting
from gateway.agent.watchers import Activity
from gateway.automation.heartbeat import Heartbeat
from gateway.automation.scheduler import ChannelReady, Deliver, Owners
from gateway.bus import OutboundMessage
from gateway.collector import collector_paused
from gateway.config.models import CHAT_PLATFORMS, ChatChannelConfig, Config
from gateway.errors import ConfigError, MemgateError, unwrap_group
from gateway.llm.on_demand import preload
from gateway.service.access import AccessInForce
from gateway.service.app import Runtime, open_runtime
from gateway.service.control import control_server, socket_path
from gateway.tools.jobs import JobTools

if TYPE_CHECKING:
    from channels.discord.channel import DiscordChannel
    from channels.matrix.channel import MatrixChannel
    from channels.slack.channel import SlackChannel
    from channels.telegram.channel import TelegramChannel
    from gateway.tools.mcp.servers import McpServers
    from memory.search.searcher import MemorySearch

log = logging.getLogger(__name__)

# What no first answer needs (MCP servers, the search index's catch-up, the model's client)
# waits for the channels at most SETTLE_HOLD seconds, and for SETTLE_QUIET seconds with no message
# being answered where it would slow one.
SETTLE_HOLD = 10.0
SETTLE_QUIET = 0.5


def build_channels(
    config: Config, runtime: Runtime, pairing: PairingStore | None = None
) -> list[TelegramChannel | DiscordChannel | MatrixChannel | SlackChannel]:
    """The enabled channels, each handing its messages to the agent; each takes its own config
    section, validated when the config was loaded."""
    handler = runtime.agent.handle
    shared: dict[str, Any] = {
        "workspace": config.workspace,
        "shutdown_grace": config.shutdown_grace,
        # Approved senders and pending codes, shared with `memgate pairing` through the file.
        "pairing": pairing or PairingStore(config.state_dir),
        "state_dir": config.state_dir,
    }
    telegram, discord = config.channels.telegram, config.channels.discord
    matrix, slack = config.channels.matrix, config.channels.slack
    for name in CHAT_PLATFORMS:
        section: ChatChannelConfig = getattr(config.channels, name)
        if section.enabled and not section.allow_from and section.dm_policy == "pairing":
            log.warning(
                "channels.%s.allow_from is empty: no owner can /pair; strangers get pairing "
                "codes you approve with `memgate pairing approve CODE`, as guests",
                name,
            )
        elif section.enabled and not section.allow_from:
            log.warning(
                "channels.%s.allow_from is empty: nobody can talk to the bot; the id of "
                "everyone who tries is logged once so you can add it",
                name,
            )
    channels: list[TelegramChannel | DiscordChannel | MatrixChannel | SlackChannel] = []
    # Imported here, not at the top: each SDK costs tens of megabytes and a good part of a
    # second to load, and a gateway runs only the platforms its config enables.
    if telegram.enabled:
        from channels.telegram.channel import TelegramChannel

        commands = ChatCommands(command_menu(), greeting())
        channels.append(TelegramChannel(handler, telegram, **shared, commands=commands))
    if discord.enabled:
        from channels.discord.channel import DiscordChannel

        channels.append(DiscordChannel(handler, discord, **shared))
    if matrix.enabled:
        from channels.matrix.channel import MatrixChannel

        channels.append(MatrixChannel(handler, matrix, **shared))
    if slack.enabled:
        from channels.slack.channel import SlackChannel

        channels.append(SlackChannel(handler, slack, **shared))
    return channels


def chat_sender(channels: Sequence[Channel]) -> Deliver:
    """The one way a message nobody is waiting on (a reminder, a heartbeat) reaches a chat.

    Returns None when the channel took it, else a short reason for the job's log and status.
    """
    by_name = {channel.name: channel for channel in channels}

    async def deliver_to_chat(message: OutboundMessage) -> str | None:
        channel = by_name.get(message.channel)
        if channel is None:
            return f"the {message.channel} channel is not running in this gateway"
        if not channel.connected:
            return f"{message.channel} is not connected"
        try:
            sent = await channel.send(message)
        except Exception as exc:  # a platform SDK's errors are its adapter's to name, not ours
            log.debug("send to chat failed chat=%s", message.chat_id, exc_info=True)
            return f"{message.channel} send failed ({type(exc).__name__})"
        return None if sent else f"{message.channel} refused or lost the message (see the log)"

    return deliver_to_chat


def chat_ready(channels: Sequence[Channel]) -> ChannelReady:
    """Each channel's connection event, by name, for the scheduler to wait on."""
    by_name = {channel.name: channel for channel in channels}

    def ready(name: str) -> asyncio.Event | None:
        channel = by_name.get(name)
        return None if channel is None else channel.ready

    return ready


def require_a_channel(config: Config) -> None:
    enabled = config.channels.telegram.enabled or config.channels.discord.enabled
    enabled = enabled or config.channels.slack.enabled
    if not (enabled or config.channels.matrix.enabled):
        raise ConfigError(
            f"{config.source}: no channel is enabled. Set channels.telegram.enabled: true "
            "(with TELEGRAM_BOT_TOKEN and allow_from) or channels.discord.enabled: true "
            "(with DISCORD_BOT_TOKEN and allow_from); `memgate chat` needs none",
            path=str(config.source),
            key="channels",
        )


async def run_service(config: Config) -> int:
    """Serve until SIGTERM/SIGINT; exit status 0 after a clean stop."""
    require_a_channel(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    serving: list[TelegramChannel | DiscordChannel | MatrixChannel | SlackChannel] = []
    access = AccessInForce(config)  # the channels' and the scheduler's, changed by a reload

    reloaded: list[Callable[[], object]] = []  # what else a reload acts on, once it is built

    def on_reload() -> None:
        log.info("received SIGHUP; reloading access settings from %s", config.source)
        access.reload(serving)
        for act in reloaded:
            act()

    loop.add_signal_handler(signal.SIGHUP, on_reload)
    started = time.monotonic()
    try:
        async with open_runtime(config, mcp_held=True) as runtime:
            # What start-up built lives as long as the process: keep it out of the cyclic
            # collector's full passes (a first large session load would otherwise walk it all).
            gc.freeze()
            # A SIGHUP during start-up already changed what is in force. The chat SDKs are
            # imported here.
            with collector_paused():
                channels = build_channels(access.config, runtime)
            serving.extend(channels)
            if (background := runtime.agent.subagents) is not None:
                # A background task of someone taken out of allow_from stops at the reload.
                reloaded.append(lambda: background.withdraw(access.is_owner))
            names = ", ".join(channel.name for channel in channels)
            log.info("memgate started channels=%s workspace=%s", names, config.workspace)

            def live() -> dict[str, Any]:
                return {
                    "channels": {channel.name: channel.connected for channel in channels},
                    "queue": runtime.consolidator.queue_depth,
                }

            jobs = {"jobs": JobTools(runtime.scheduler, config.tz).control_op}
            # `memgate chat`, `status` and `jobs` talk to this process through the socket.
            socket = socket_path(config.state_dir)
            async with (
                control_server(
                    socket, runtime.agent.handle, live, owed=runtime.agent.owed, ops=jobs
                ),
                web_console(runtime, access, lambda: {**live(), **optional_states(runtime)}),
            ):
                await _serve(config, runtime, channels, stop, access.is_owner)
            log.info("stopping: channels first, then memory")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
    log.info("memgate stopped cleanly after %.0fs", time.monotonic() - started)
    return 0


def web_console(
    runtime: Runtime, access: AccessInForce, live: Callable[[], dict[str, Any]]
) -> AbstractAsyncContextManager[object]:
    """The web console on console.listen (its web server imported only then), else nothing."""
    config = runtime.config
    if not config.console.listen:
        return nullcontext()
    from gateway.console.server import console_server
    from gateway.console.sources import Sources

    def owners() -> dict[str, list[str]]:
        channels = access.config.channels  # allow_from as SIGHUP last set it
        sections = {name: getattr(channels, name) for name in type(channels).model_fields}
        return {name: s.allow_from for name, s in sections.items() if hasattr(s, "allow_from")}

    jobs = JobTools(runtime.scheduler, config.tz)  # what `memgate jobs` reaches through the socket
    pairing = PairingStore(config.state_dir)  # the file `memgate pairing` changes
    return console_server(
        Sources(
            config, runtime.memory, pairing, jobs, runtime.counter, live, owners, runtime.search
        )
    )


def optional_states(runtime: Runtime) -> dict[str, Any]:
    """What memgate answers without, as it stands: reported beside the status, never waited for.

    Each MCP server: starting, up, restarting or failed (with why); embeddings: off, idle (not
    called yet), ok or failing, as their last call went.
    """
    servers = runtime.mcp.connections if runtime.mcp is not None else []
    search = runtime.search
    embeddings = {"state": search.embeddings_state if search is not None else "off"}
    if search is not None and search.embeddings_error:
        embeddings["error"] = search.embeddings_error
    return {
        "mcp": {
            c.name: {"state": c.state, "tools": len(c.tools)}
            | ({"error": c.error} if c.error else {})
            for c in servers
        },
        "embeddings": embeddings,
    }


async def settled(channels: Sequence[Channel], activity: Activity) -> None:
    """Return once every channel is connected and no message has been answered for SETTLE_QUIET, or
    after SETTLE_HOLD at most: when what no first answer needs may begin."""
    with suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_HOLD):
            for channel in channels:
                await channel.ready.wait()
            await activity.quiet_for(SETTLE_QUIET)


async def release_mcp(mcp: McpServers, channels: Sequence[Channel], activity: Activity) -> None:
    """Let the MCP servers start once settled: the SDK's import (seconds of the interpreter on a
    busy machine) would slow the channels' start and the first answers, which need no server
    unless they call one of its tools (a call lets the servers go at once)."""
    await settled(channels, activity)
    mcp.release()


class _Stopped(Exception):
    """The service stopped while the index was being brought up to date."""


async def warm_search(
    search: MemorySearch, channels: Sequence[Channel], activity: Activity
) -> None:
    """Bring the search index up to date once settled, so that the model's first memory_search
    does not build it inside a turn (a missing index of a year of chats takes a minute or more;
    a search meanwhile waits for this one). A failure is left to the next search to meet."""
    await settled(channels, activity)
    stopping = threading.Event()

    def progress(done: int, total: int) -> None:  # called between files, each its own commit
        if stopping.is_set():
            raise _Stopped

    began = time.monotonic()
    try:
        # The words only: embeddings stay with the searches, as many at a time as they allow.
        stats = await asyncio.to_thread(search.index.refresh, progress)
    except asyncio.CancelledError:
        stopping.set()  # the thread stops after its file, so a stop does not wait for a year
        raise
    except _Stopped:
        return
    except Exception as exc:  # sqlite3, OSError: the tool's own refresh reports it to the model
        log.warning("search index not brought up to date at start error=%s", exc)
        log.debug("search index refresh at start failed", exc_info=True)
        return
    if stats.files:
        log.info(
            "search index brought up to date files=%d entries_added=%d seconds=%.1f",
            stats.files,
            stats.added,
            time.monotonic() - began,
        )


async def load_client(channels: Sequence[Channel]) -> None:
    """Import the model's client (the openai SDK) once every channel is connected, or after
    SETTLE_HOLD at most: `/healthz` says ready without it, and a message that comes meanwhile waits
    for the same import."""
    with suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_HOLD):
            for channel in channels:
                await channel.ready.wait()
    await preload()


async def _serve(
    config: Config,
    runtime: Runtime,
    channels: Sequence[Channel],
    stop: asyncio.Event,
    owners: Owners,
) -> None:
    def status() -> dict[str, Any]:
        connected = {channel.name: channel.connected for channel in channels}
        return {
            "status": "ok" if all(connected.values()) else "degraded",
            "channels": {name: {"connected": up} for name, up in connected.items()},
            "consolidation_queue": runtime.consolidator.queue_depth,
            **optional_states(runtime),
        }

    # One channel's failure comes out as itself; several stay a group, none dropped.
    with unwrap_group():
        await _supervise(config, runtime, channels, stop, status, owners)


async def _supervise(
    config: Config,
    runtime: Runtime,
    channels: Sequence[Channel],
    stop: asyncio.Event,
    status: Callable[[], dict[str, Any]],
    owners: Owners,
) -> None:
    async def health() -> None:
        from gateway.service.health import health_server  # its web server only when it is wanted

        assert config.health.listen is not None
        async with health_server(config.health.listen, runtime.metrics, status):
            await asyncio.Event().wait()

    deliver = chat_sender(channels)
    if (approvals := runtime.agent.tools.approvals) is not None:
        approvals.notify = deliver  # exec's questions to the owner go out as any message does
    automation = config.automation
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(channel.run(), name=f"channel-{channel.name}") for channel in channels
        ]
        if config.health.listen:
            tasks.append(group.create_task(health(), name="health"))
        jobs = runtime.scheduler.run(runtime.agent, deliver, owners, chat_ready(channels))
        tasks.append(group.create_task(jobs, name="scheduler"))
        if (background := runtime.agent.subagents) is not None:  # `spawn`'s tasks, and results
            work = background.run(runtime.agent.job_message, deliver, chat_ready(channels), owners)
            tasks.append(group.create_task(work, name="subagents"))
        if automation.heartbeat and automation.home:
            beat = Heartbeat(
                config.workspace, automation.home, automation.heartbeat, runtime.scheduler.clock
            )
            home = chat_ready(channels)(beat.channel)
            tasks.append(
                group.create_task(beat.run(runtime.agent, deliver, home), name="heartbeat")
            )
        stopping = group.create_task(stop.wait(), name="stop-signal")
        loading = group.create_task(load_client(channels), name="llm-client")
        stopping.add_done_callback(lambda _: loading.cancel())
        mcp = runtime.mcp
        if mcp is not None:  # not one of `tasks`: its end is no reason to stop
            released = group.create_task(
                release_mcp(mcp, channels, runtime.agent.activity), name="mcp-release"
            )
            stopping.add_done_callback(lambda _: released.cancel())
        if runtime.search is not None:  # not one of `tasks` either
            warming = group.create_task(
                warm_search(runtime.search, channels, runtime.agent.activity), name="search-warm"
            )
            stopping.add_done_callback(lambda _: warming.cancel())
        # A channel that ends on its own (a fatal error) stops the whole gateway, so the
        # supervisor (systemd) can restart it; the task group raises its error for us.
        done, _ = await asyncio.wait([stopping, *tasks], return_when=asyncio.FIRST_COMPLETED)
        ended = [task for task in done if task is not stopping and not task.exception()]
        for task in tasks:
            task.cancel()
        stopping.cancel()
    if ended and not stop.is_set():
        raise MemgateError(f"{ended[0].get_name()} stopped unexpectedly")
