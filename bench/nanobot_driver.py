"""Drives nanobot in-process for each figure; run by bench/.venv-nanobot as `python -m bench.nanobot_driver`.

nanobot is wired the way its `nanobot gateway` command wires it (config loader, its own provider
factory, SessionManager, CronService, AgentLoop) and every message goes through its MessageBus
into `AgentLoop.run()`, the path its chat channels use. Its loguru output is disabled, as
`nanobot agent` does without --logs; memgate's INFO lines are off in its driver too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from loguru import logger
from nanobot.agent.loop import AgentLoop
from nanobot.bus.events import InboundMessage, OutboundMessage
from nanobot.bus.queue import MessageBus
from nanobot.cli.commands import _make_provider  # its own provider factory, not a copy
from nanobot.config.loader import load_config, set_config_path
from nanobot.cron.service import CronService
from nanobot.session.manager import Session, SessionManager
from nanobot.utils.helpers import sync_workspace_templates

from bench import workloads
from bench.configs import nanobot_config, whole_history_window
from bench.protocol import FakeControl, Run, peak_rss_mb, rss_mb, run_driver
from bench.workloads import Ask


class BusClient:
    """Plays a chat channel: publishes inbound messages, matches replies by chat."""

    def __init__(self, bus: MessageBus) -> None:
        self._bus = bus
        self._waiting: dict[str, asyncio.Future[OutboundMessage]] = {}

    async def run(self) -> None:
        while True:
            reply = await self._bus.consume_outbound()
            if reply.metadata.get("_progress"):
                continue
            future = self._waiting.pop(reply.chat_id, None)
            if future is not None and not future.done():
                future.set_result(reply)

    async def ask(self, chat_id: str, text: str) -> str:
        future = asyncio.get_running_loop().create_future()
        self._waiting[chat_id] = future
        await self._bus.publish_inbound(InboundMessage("bench", "user", chat_id, text))
        return (await future).content


def _build(root: Path, llm: str, **config: Any) -> tuple[AgentLoop, MessageBus]:
    """nanobot's objects as its gateway command builds them, on `root/workspace`."""
    workspace = root / "workspace"
    path = root / "config.json"
    if not path.exists():
        root.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nanobot_config(workspace, llm, **config)), encoding="utf-8")
    set_config_path(path)
    loaded = load_config(path)
    sync_workspace_templates(loaded.workspace_path, silent=True)
    bus = MessageBus()
    defaults = loaded.agents.defaults
    agent = AgentLoop(
        bus=bus,
        provider=_make_provider(loaded),
        workspace=loaded.workspace_path,
        model=defaults.model,
        max_iterations=defaults.max_tool_iterations,
        context_window_tokens=defaults.context_window_tokens,
        web_search_config=loaded.tools.web.search,
        web_proxy=loaded.tools.web.proxy or None,
        exec_config=loaded.tools.exec,
        cron_service=CronService(loaded.workspace_path / "cron" / "jobs.json"),
        restrict_to_workspace=loaded.tools.restrict_to_workspace,
        session_manager=SessionManager(loaded.workspace_path),
        mcp_servers=loaded.tools.mcp_servers,
        channels_config=loaded.channels,
        timezone=defaults.timezone,
    )
    return agent, bus


@asynccontextmanager
async def nanobot(run: Run, name: str, **config: Any) -> AsyncIterator[tuple[AgentLoop, Ask]]:
    """A running nanobot agent loop on `run.workdir/name`, and an `ask` through its bus."""
    agent, bus = _build(run.workdir / name, run.llm, **config)
    client = BusClient(bus)
    tasks = [asyncio.create_task(agent.run()), asyncio.create_task(client.run())]
    try:
        yield agent, client.ask
    finally:
        agent.stop()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await agent.close_mcp()  # drains its background consolidations


async def overhead(run: Run) -> dict[str, Any]:
    """Figure a: per-turn latency and throughput for 1, 10 and 100 concurrent chats.

    `floor` is the LLM round trip alone: the same fake answering through this system's provider.
    """
    async with nanobot(run, "floor") as (agent, ask):
        await workloads.warm_up(ask)

        async def call(text: str) -> None:
            await agent.provider.chat(messages=[{"role": "user", "content": text}])

        results: dict[str, Any] = {"floor": await workloads.round_trips(call, 100)}
    for sessions in run.params["sessions"]:
        async with nanobot(run, f"a{sessions}") as (_, ask):
            await workloads.warm_up(ask)
            rounds = run.params.get("rounds", {}).get(str(sessions), 1)
            results[str(sessions)] = await workloads.concurrent_chats(
                ask, sessions, run.params["turns"], rounds
            )
    return results


async def history(run: Run) -> dict[str, Any]:
    """Figure b: turn latency on a chat whose file already holds N messages, all but the last 10
    consolidated or none of them under a context window that holds them (so nothing consolidates)."""
    results: dict[str, Any] = {}
    for variant in run.params.get("variants", workloads.HISTORY_VARIANTS):
        results[variant] = {}
        for count in run.params["sizes"]:
            name = f"b-{variant}-{count}"
            consolidated = variant == "consolidated"
            config = {} if consolidated else {"context_window": whole_history_window(count)}
            _build(run.workdir / name, run.llm, **config)  # its config and workspace
            # Written by nanobot's own SessionManager, in its format, before the process below.
            pointer = max(0, count - 10) if consolidated else 0
            session = Session(
                "bench:hist", workloads.history_messages(count), last_consolidated=pointer
            )
            SessionManager(run.workdir / name / "workspace").save(session)
            del session
            gc.collect()  # the writer's objects are not the system's: their collection is not timed
            async with nanobot(run, name, **config) as (_, ask):
                case = await workloads.history_case(ask, run.params["turns"], count)
            results[variant][str(count)] = case
    return results


async def held(run: Run) -> dict[str, Any]:
    """Figure c: reply latency while this chat's consolidation call is held at the fake, against
    the same chat on a second nanobot (its default window: nothing consolidates) in this process.

    nanobot 0.1.4.post6 has no message-count window: it consolidates when its token estimate of
    the chat's prompt reaches its budget. The context window is set so that this happens after a
    few turns (its fixed prompt measured first, plus `margin` tokens).
    """
    probe, _ = _build(run.workdir / "c-probe", run.llm)
    fixed, _ = probe.memory_consolidator.estimate_session_prompt_tokens(
        probe.sessions.get_or_create("bench:probe")
    )
    window = fixed + run.params["max_tokens"] + 1024 + run.params["margin"]
    control = FakeControl(run.llm)
    config = {"context_window": window, "max_tokens": run.params["max_tokens"]}
    async with (
        nanobot(run, "c", **config) as (_, ask),
        nanobot(run, "c-plain") as (_, plain),  # its default window: nothing consolidates
    ):
        await workloads.warm_up(ask)
        await workloads.warm_up(plain)
        result = await workloads.until_held(ask, plain, control, run.params["hold"], max_turns=40)
    return {**result, "context_window": window}


async def rss(run: Run) -> dict[str, Any]:
    """Figure e: this process's memory after start and at its peak after N chats had one turn.

    The process first imports what `nanobot gateway` with its Telegram channel needs (its CLI
    module is imported above; its Telegram channel brings python-telegram-bot), and its Discord
    channel when `channels` names it. With no sessions, the start alone.
    """
    modules = ["nanobot.channels.manager", "nanobot.channels.telegram"]
    if "discord" in run.params.get("channels", ["telegram"]):
        modules.append("nanobot.channels.discord")
    for module in modules:
        importlib.import_module(module)
    async with nanobot(run, "e") as (_, ask):
        started_mb = rss_mb()
        if not run.params["sessions"]:
            return {"startup_mb": started_mb}
        await workloads.warm_up(ask)
        wall = await workloads.one_turn_each(ask, run.params["sessions"])
        return {
            "startup_mb": started_mb,
            "peak_mb": peak_rss_mb(),
            "end_mb": rss_mb(),
            "wall_s": wall,
        }


async def prompts(run: Run) -> dict[str, Any]:
    """Figure f: a long chat; the orchestrator counts the prompts at the fake afterwards."""
    config = {
        "context_window": run.params["context_window"],
        "max_tokens": run.params["max_tokens"],
    }
    async with nanobot(run, "f", **config) as (_, ask):
        wall = await workloads.long_chat(ask, run.params["turns"])
    return {"wall_s": wall}


if __name__ == "__main__":
    logger.disable("nanobot")
    run_driver(
        {"overhead": overhead, "history": history, "held": held, "rss": rss, "prompts": prompts}
    )
