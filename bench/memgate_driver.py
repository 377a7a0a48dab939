"""Drives memgate in-process for each figure; run by memgate's venv as `python -m bench.memgate_driver`.

memgate is built exactly as `memgate run` builds it (`gateway.service.app.open_runtime`) and every message
goes through `AgentLoop.handle`, the entry point its channels call.
"""

from __future__ import annotations

import gc
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC
from pathlib import Path
from typing import Any

from bench import workloads
from bench.configs import memgate_config, whole_history_window
from bench.protocol import FakeControl, Run, peak_rss_mb, rss_mb, run_driver
from bench.workloads import Ask
from gateway.bus import InboundMessage
from gateway.cli.templates import WORKSPACE_FILES
from gateway.config.file import parse_config
from gateway.service.app import Runtime, open_runtime
from memory.sessions.store import SessionStore


def _workspace(root: Path) -> Path:
    """A workspace as `memgate init` leaves it (its bootstrap files are in every prompt)."""
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    for name, text in WORKSPACE_FILES.items():
        (workspace / name).write_text(text, encoding="utf-8")
    return workspace


@asynccontextmanager
async def memgate(run: Run, name: str, **config: Any) -> AsyncIterator[tuple[Runtime, Ask]]:
    """A memgate runtime on a fresh workspace under `run.workdir/name`, and its `ask`."""
    root = run.workdir / name
    workspace = root / "workspace" if (root / "workspace").exists() else _workspace(root)
    raw = memgate_config(workspace, run.llm, **config)
    async with open_runtime(parse_config(raw, root / "config.yaml", env={})) as runtime:

        async def ask(chat_id: str, text: str) -> str:
            # The owner in a private chat, as nanobot treats every sender: the whole prompt
            # (MEMORY.md, USER.md, today's note, search) and consolidation into MEMORY.md.
            message = InboundMessage("bench", chat_id, "user", text, sender_is_owner=True)
            reply = await runtime.agent.handle(message)
            return reply.text if reply is not None else ""

        yield runtime, ask


async def overhead(run: Run) -> dict[str, Any]:
    """Figure a: per-turn latency and throughput for 1, 10 and 100 concurrent chats.

    `floor` is the LLM round trip alone: the same fake answering through this system's provider.
    """
    async with memgate(run, "floor") as (runtime, ask):
        await workloads.warm_up(ask)

        async def call(text: str) -> None:
            await runtime.provider.chat([{"role": "user", "content": text}])

        results: dict[str, Any] = {"floor": await workloads.round_trips(call, 100)}
    for sessions in run.params["sessions"]:
        async with memgate(run, f"a{sessions}") as (_, ask):
            await workloads.warm_up(ask)
            rounds = run.params.get("rounds", {}).get(str(sessions), 1)
            results[str(sessions)] = await workloads.concurrent_chats(
                ask, sessions, run.params["turns"], rounds
            )
    return results


async def history(run: Run) -> dict[str, Any]:
    """Figure b: turn latency on a chat whose file already holds N messages, all but the last 10
    consolidated (what a deployment has) or none of them under a context window that holds them."""
    results: dict[str, Any] = {}
    for variant in run.params.get("variants", workloads.HISTORY_VARIANTS):
        results[variant] = {}
        for count in run.params["sizes"]:
            name = f"b-{variant}-{count}"
            consolidated = variant == "consolidated"
            await _prewrite(_workspace(run.workdir / name), "bench:hist", count, consolidated)
            gc.collect()  # the writer's objects are not the system's: their collection is not timed
            config: dict[str, Any] = {}
            if not consolidated:
                config = {
                    "context_window": whole_history_window(count),
                    "memory": {"window": count + 1000},  # no message-count trigger either
                }
            async with memgate(run, name, **config) as (_, ask):
                case = await workloads.history_case(ask, run.params["turns"], count)
            results[variant][str(count)] = case
    return results


async def _prewrite(workspace: Path, key: str, count: int, consolidated: bool) -> None:
    """Write the session file through memgate's own store: N messages, then the pointer marker."""
    store = SessionStore(workspace / "sessions", UTC)
    session = await store.get(key)
    await store.append(session, workloads.history_messages(count))
    if consolidated:
        await store.mark_consolidated(session, max(0, count - 10))


async def held(run: Run) -> dict[str, Any]:
    """Figure c: reply latency while this chat's consolidation call is held at the fake, against
    the same chat on a second memgate (window 1000: nothing consolidates) in this process."""
    control = FakeControl(run.llm)
    async with (
        memgate(run, "c", memory={"window": run.params["window"]}) as (_, ask),
        memgate(run, "c-plain", memory={"window": 1000}) as (_, plain),
    ):
        await workloads.warm_up(ask)
        await workloads.warm_up(plain)
        return await workloads.until_held(ask, plain, control, run.params["hold"], max_turns=40)


async def rss(run: Run) -> dict[str, Any]:
    """Figure e: this process's memory after start and at its peak after N chats had one turn.

    The process first imports what `memgate run` with Telegram enabled imports: the CLI, the
    service and the Telegram channel with python-telegram-bot; with `channels` naming Discord
    too, its channel with discord.py (which only comes with Discord enabled). With no sessions,
    the start alone.
    """
    modules = ["gateway.cli.main", "gateway.service.run", "channels.telegram.channel"]
    if "discord" in run.params.get("channels", ["telegram"]):
        modules.append("channels.discord.channel")
    for module in modules:
        importlib.import_module(module)
    async with memgate(run, "e") as (_, ask):
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
    window, max_tokens = run.params["context_window"], run.params["max_tokens"]
    async with memgate(run, "f", context_window=window, max_tokens=max_tokens) as (rt, ask):
        wall = await workloads.long_chat(ask, run.params["turns"])
        await rt.consolidator.wait_idle()
        return {"wall_s": wall, "budget": rt.config.llm.budget}


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    run_driver(
        {"overhead": overhead, "history": history, "held": held, "rss": rss, "prompts": prompts}
    )
