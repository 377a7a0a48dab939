"""`memgate chat`: the terminal's conversation, with the running service's agent when one is
serving the workspace, else with an agent in this process; `-m` sends one message and prints the
answer, as it is written unless `--no-stream`.

Only a chat in this process imports the agent, the memory and the model's SDK, and those imports
run with the garbage collector paused (`collector_paused`). Output into a pipe its reader closed
(`| head`) ends quietly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway import __version__
from gateway.bus import Handler, ReplyStream
from gateway.cli.setup import config_path, explicit_path, first_run, llm_configured
from gateway.collector import collector_paused
from gateway.config.file import load_config, memgate_home, require_api_key
from gateway.config.models import Config
from gateway.logs import configure_logging
from gateway.service.control import is_serving, remote_handler, request, socket_path
from gateway.tools.approvals import Approvals
from memory.fileio import FILE_MODE, ensure_private_dir


def cmd_chat(args: argparse.Namespace) -> int:
    with collector_paused():
        from channels.terminal import Printer, TerminalChannel

    path = config_path(args)
    if not explicit_path(args) and not llm_configured(path):
        first_run(path)
    config = load_config(path, must_exist=explicit_path(args), runs_channels=False)
    debug = args.verbose or args.debug
    configure_logging("DEBUG" if debug else "WARNING", config.secrets())
    if not debug:
        # On a terminal the reply itself names a model failure; the log line would say it twice.
        logging.getLogger("gateway.agent.loop").setLevel(logging.ERROR)
    socket = socket_path(config.state_dir)
    key = args.session or "terminal:local"

    async def remote_owed() -> list[str]:
        answer = await request(socket, {"op": "owed", "session": key})
        return list(answer.get("texts") or []) if answer else []

    async def talk(
        handler: Handler,
        where: str,
        owed: Callable[[], Awaitable[list[str]]],
        approvals: Approvals | None = None,
        beside: Callable[[TerminalChannel], Awaitable[None]] | None = None,  # background tasks
    ) -> int:
        terminal = TerminalChannel(
            handler,
            session_key=args.session,
            history_path=chat_history_path(config),
            streaming=not args.no_stream,
        )
        if approvals is not None:
            approvals.notify = terminal.notify  # exec's requests are shown here, answered here
        if args.message is not None:
            for text in await owed():
                print(f"(kept from before a restart)\n{text}\n")
            printer = Printer(lead="")  # the answer printed as it is written, unless --no-stream
            shown = UntilClosed(printer)
            inbound = terminal.inbound(args.message)
            reply = await (handler(inbound) if args.no_stream else handler(inbound, shown))
            try:
                if printer.printed and not shown.closed:
                    print()  # ends the line of what was printed
                # Shown first, then marked delivered: a crash in between leaves the answer owed
                # (shown again next time) rather than lost.
                if reply is not None and reply.failed:
                    print(f"memgate: {reply.text}", file=sys.stderr, flush=True)
                elif shown.closed:
                    pass  # the reader has gone (`| head`): it wants no more
                elif printer.printed and reply is not None:
                    rest = printer.rest(reply.text_with_commands())
                    if rest:
                        print(rest, flush=True)
                else:
                    print(reply.text_with_commands() if reply is not None else "", flush=True)
            except BrokenPipeError:
                shown.closed = True
            if reply is not None:
                await reply.sent()  # a reader that left (`| head`) had all it wanted of it
            if shown.closed:
                quiet_stdout()
            return 1 if reply is not None and reply.failed else 0
        print(f"memgate {__version__} · model {config.llm.model} · {where} · /help, Ctrl-D to quit")
        # Answers a restart kept from this terminal (stored, never shown) come first.
        for text in await owed():
            print(f"\n(kept from before a restart)\n{text}\n", flush=True)
        await (terminal.run() if beside is None else beside(terminal))
        return 0

    async def chat() -> int:
        if await is_serving(socket):
            # The service holds the workspace: talk to its agent, memory and sessions.
            return await talk(
                remote_handler(socket), "attached to the running service", remote_owed
            )
        require_api_key(config)
        # Only a chat in this process needs the agent, the memory and the model's SDK: attached
        # to the service, none of them is imported.
        with collector_paused():
            from gateway.service.app import open_runtime
        # One message: an MCP server starts only if the model calls one of its tools.
        async with open_runtime(config, mcp_on_demand=args.message is not None) as runtime:

            async def local_owed() -> list[str]:
                texts = []
                for reply in await runtime.agent.owed("terminal", "local", key):
                    texts.append(reply.text)
                    await reply.sent()
                return texts

            async def beside(terminal: TerminalChannel) -> None:
                # The background tasks spawn starts run beside the prompt, results printed there.
                assert runtime.agent.subagents is not None
                await runtime.agent.subagents.run_beside(terminal, runtime.agent.job_message)

            return await talk(
                runtime.agent.handle,
                "in this process",
                local_owed,
                runtime.agent.tools.approvals,
                beside if runtime.agent.subagents is not None else None,
            )

    return asyncio.run(chat())


class UntilClosed:
    """The terminal's printer until the reader of stdout goes away (`chat -m … | head`); then
    the rest of the answer is dropped instead of failing the turn, which goes on and stores it."""

    def __init__(self, printer: ReplyStream) -> None:
        self.printer = printer
        self.closed = False

    async def write(self, text: str) -> None:
        if not self.closed:
            try:
                await self.printer.write(text)
            except BrokenPipeError:
                self.closed = True

    async def status(self, note: str) -> None:
        if not self.closed:
            try:
                await self.printer.status(note)
            except BrokenPipeError:
                self.closed = True


def chat_history_path(config: Config) -> Path:
    """The terminal's line history, in the state folder; an older `~/.memgate/chat_history` moves."""
    path = config.state_dir / "chat_history"
    old = memgate_home() / "chat_history"
    if old.is_file() and not path.exists():
        ensure_private_dir(path.parent)
        shutil.move(old, path)
        os.chmod(path, FILE_MODE)
    return path


def quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush has no pipe to break."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
