"""The terminal channel: an interactive prompt with line editing and history, or one message.

Imports only `gateway.bus` of ours. Lines are read on a daemon thread so a blocked `input()` never
keeps the process from exiting. With streaming (the default) an answer is printed as it is written.
Input is read while an answer is written too: `/stop` typed then stops it at once, as Ctrl-C does
(what was printed stays, marked, and the prompt comes back); other lines wait their turn. Ctrl-C or
Ctrl-D at the prompt ends the chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import signal
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from gateway.bus import Handler, InboundMessage, OutboundMessage

PROMPT = "you> "

T = TypeVar("T")


class TerminalChannel:
    """Talks to the agent from this terminal, as session `terminal:local` by default."""

    name = "terminal"

    def __init__(
        self,
        handler: Handler,
        *,
        session_key: str | None = None,
        history_path: Path | None = None,
        streaming: bool = True,
    ) -> None:
        self._handler = handler
        self._streaming = streaming
        self._session_key = session_key
        self._history_path = history_path
        self._user = getpass.getuser()
        self.connected = False

    def inbound(self, text: str) -> InboundMessage:
        return InboundMessage(
            channel="terminal",
            chat_id="local",
            sender_id=self._user,
            sender_name=self._user,
            text=text,
            sender_is_owner=True,  # whoever holds this terminal holds the workspace too
            session_key=self._session_key,
        )

    async def notify(self, message: OutboundMessage) -> str | None:
        """Print a message nobody asked for (exec's request for approval); None: shown."""
        print(f"\n{message.text_with_commands()}\n", flush=True)
        return None

    async def ask(self, text: str) -> str:
        """Send one message and return the reply text."""
        reply = await self._handler(self.inbound(text))
        if reply is None:
            return ""
        await reply.sent()  # the caller prints it; a terminal refuses nothing
        return reply.text_with_commands()

    async def _answer(self, text: str, printer: Printer) -> str:
        """Send one message, the answer printed as it comes; returns what is left to print."""
        reply: OutboundMessage | None = await self._handler(self.inbound(text), stream=printer)
        if reply is None:
            return ""
        await reply.sent()  # printed below; a terminal refuses nothing
        return printer.rest(reply.text_with_commands())

    async def run(self) -> None:
        """Prompt, answer, repeat, until end of input (Ctrl-D), Ctrl-C at the prompt, or
        cancellation."""
        self._setup_readline()
        self.connected = True
        interrupt = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, interrupt.set)
        typed: list[str | None] = []  # lines typed during an answer, to send after it (None: EOF)
        reading: asyncio.Future[str | None] | None = None  # a line being read since an answer
        try:
            while True:
                interrupt.clear()
                if typed:
                    line = typed.pop(0)
                else:
                    if reading is None:
                        reading = asyncio.ensure_future(_read_line(PROMPT))
                    else:
                        print(PROMPT, end="", flush=True)  # its input() began without one
                    line = await _until_interrupt(reading, interrupt)
                    reading = None
                if line is None:  # Ctrl-D, or Ctrl-C at the prompt
                    print(flush=True)
                    return
                if not line.strip():
                    continue
                printer = Printer()
                asked = self._answer(line, printer) if self._streaming else self.ask(line)
                answer = asyncio.ensure_future(asked)
                stopped, reading = await self._while_answering(answer, interrupt, typed)
                if stopped:
                    # The agent cancels the turn; the message stays in the session, and an
                    # answer it had begun comes back with its "(stopped)" mark.
                    rest = ""
                    with contextlib.suppress(asyncio.CancelledError):
                        rest = await answer
                    print(rest if printer.printed else "\nstopped", end="\n\n", flush=True)
                    continue
                reply = answer.result()
                if printer.printed:
                    print(reply, end="\n\n", flush=True)
                elif reply:
                    print(f"\n{reply}\n", flush=True)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            self.connected = False
            self._save_history()

    async def _while_answering(
        self, answer: asyncio.Future[str], interrupt: asyncio.Event, typed: list[str | None]
    ) -> tuple[bool, asyncio.Future[str | None] | None]:
        """Read the terminal until `answer` is done: Ctrl-C or a typed `/stop` stops it (the agent
        cancels the turn), other lines go to `typed`. Returns whether it was stopped, and the
        read still under way (it becomes the next prompt's)."""
        reading: asyncio.Future[str | None] | None = asyncio.ensure_future(_read_line(""))
        while True:
            waiter = asyncio.ensure_future(interrupt.wait())
            watched: list[asyncio.Future[Any]] = [answer, waiter]
            if reading is not None:
                watched.append(reading)
            try:
                await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if answer.done():
                return False, reading
            if interrupt.is_set():
                await self._handler(self.inbound("/stop"))
                return True, reading
            assert reading is not None and reading.done()  # the one left to wake us
            line = reading.result()
            if _is_stop(line):
                await self._handler(self.inbound("/stop"))
                return True, None
            if _is_answer(line):
                # An answer the running turn waits for (exec's /approve): it cannot wait its turn.
                assert line is not None
                reply = await self._handler(self.inbound(line))
                if reply is not None:
                    print(f"\n{reply.text_with_commands()}\n", flush=True)
                    await reply.sent()
                reading = asyncio.ensure_future(_read_line(""))
                continue
            typed.append(line)
            # After end of input there is nothing more to read.
            reading = asyncio.ensure_future(_read_line("")) if line is not None else None

    def _setup_readline(self) -> None:
        try:
            import readline  # line editing and history where the platform has it
        except ImportError:
            return
        if self._history_path is not None and self._history_path.exists():
            try:
                readline.read_history_file(self._history_path)
            except OSError:
                pass
        readline.set_history_length(1000)

    def _save_history(self) -> None:
        if self._history_path is None:
            return
        try:
            import readline

            self._history_path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(self._history_path)
        except (ImportError, OSError):
            pass


class Printer:
    """The terminal's `ReplyStream`: the answer printed as it is written, tool notes on a line
    of their own."""

    def __init__(self, lead: str = "\n") -> None:
        self.printed = False
        self._lead = lead  # printed before the first piece: the prompt's line is left alone
        self._text = ""  # the answer printed since the last tool note

    async def write(self, text: str) -> None:
        if not self.printed:
            print(self._lead, end="")
        self.printed = True
        self._text += text
        print(text, end="", flush=True)

    async def status(self, note: str) -> None:
        # On a line of its own: after a blank line at first, else right after the text printed.
        lead = "\n" if not self.printed or self._text else ""
        print(f"{lead}[{note}]", flush=True)
        self.printed = True
        self._text = ""

    def rest(self, whole: str) -> str:
        """What of the whole reply is not on the screen yet (all of it if it is another text,
        such as an apology after a failure)."""
        if not self.printed:
            return whole
        shown = self._text.strip()
        if shown and whole.startswith(shown):
            return whole[len(shown) :]
        return f"\n{whole}"


def _is_stop(line: str | None) -> bool:
    return line is not None and line.strip().split(maxsplit=1)[:1] == ["/stop"]


def _is_answer(line: str | None) -> bool:
    return line is not None and line.strip().split(maxsplit=1)[:1] in (["/approve"], ["/deny"])


async def _until_interrupt(
    work: asyncio.Future[T] | Coroutine[Any, Any, T], interrupt: asyncio.Event
) -> T | None:
    """The result of `work`, or None as soon as `interrupt` is set (work then goes on)."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(interrupt.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    return task.result() if task.done() else None


async def _read_line(prompt: str) -> str | None:
    """input() on a daemon thread; None at end of input."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str | None] = loop.create_future()

    def deliver(value: str | None) -> None:
        if not done.done():
            done.set_result(value)

    def read() -> None:
        try:
            value: str | None = input(prompt)
        except (EOFError, KeyboardInterrupt):
            value = None
        try:
            loop.call_soon_threadsafe(deliver, value)
        except RuntimeError:  # the loop closed while we waited for input
            pass

    threading.Thread(target=read, name="terminal-input", daemon=True).start()
    return await done
