"""A real `TelegramChannel` served against the fake Bot API: how every Telegram test sets one up.

`make_channel` builds a channel on the fake with its workspace and state under a folder (user 42
allowed), `agent_channel` builds one in front of a runtime's real agent as `memgate run` wires it,
and `running` serves either for the length of a block. `Recorder` is a handler that answers and
records what it was given.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from channels.base import ChatCommands
from channels.telegram.channel import TelegramChannel
from gateway.agent.commands.registry import command_menu, greeting
from gateway.bus import InboundMessage, OutboundMessage
from gateway.config.models import TelegramConfig
from gateway.service.app import Runtime
from tests.fakes.telegram_api import TOKEN, WAIT, FakeTelegram

Reply = Callable[[InboundMessage], str | None]


class Recorder:
    """A handler that records what it is given and answers `reply(message)`.

    `delivered` holds the text of each reply the channel reported as sent (its `on_sent`), so a
    test can wait until a reply's delivery is over: no retry of it can follow that.
    """

    def __init__(
        self,
        reply: Reply = lambda m: f"echo: {m.text}",
        until: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.seen: list[InboundMessage] = []
        self.delivered: list[str] = []
        self.reply = reply
        self.until = until  # a turn that lasts until this returns (None: no time at all)
        self._changed = asyncio.Condition()

    async def __call__(
        self, message: InboundMessage, stream: object = None
    ) -> OutboundMessage | None:
        self.seen.append(message)
        if self.until is not None:
            await self.until()
        text = self.reply(message)
        if text is None:
            return None

        async def mark() -> None:
            async with self._changed:
                self.delivered.append(text)
                self._changed.notify_all()

        return OutboundMessage("telegram", message.chat_id, text, on_sent=mark)

    async def wait_delivered(self, count: int, within: float = WAIT) -> list[str]:
        """Wait until `count` replies are past their delivery (sent, or given up for good)."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: len(self.delivered) >= count)
        return self.delivered


def make_channel(
    fake: FakeTelegram, tmp_path: Path, handler: Any, **options: Any
) -> TelegramChannel:
    """A TelegramChannel on the fake, its workspace and state under tmp_path; user 42 allowed.
    Options are TelegramConfig keys or the constructor's own."""
    own = {k: options.pop(k) for k in ("pairing", "commands") if k in options}
    settings = TelegramConfig(
        token=options.pop("token", TOKEN),
        base_url=fake.url,
        base_file_url=fake.file_url,
        allow_from=options.pop("allow_from", ["42"]),
        dm_policy=options.pop("dm_policy", "allowlist"),
        **{k: options.pop(k) for k in list(options) if k in TelegramConfig.model_fields},
    )
    return TelegramChannel(
        handler,
        settings,
        workspace=options.pop("workspace", tmp_path / "workspace"),
        state_dir=options.pop("state_dir", tmp_path / "state"),
        shutdown_grace=options.pop("shutdown_grace", 1.0),
        commands=own.pop("commands", ChatCommands(command_menu(), greeting())),
        **own,
        **options,
    )


def agent_channel(fake: FakeTelegram, runtime: Runtime, **options: Any) -> TelegramChannel:
    """A TelegramChannel on the fake in front of the runtime's agent, on its workspace and state
    folder; options as for `make_channel`."""
    config = runtime.config
    return make_channel(
        fake,
        config.workspace.parent,
        runtime.agent.handle,
        workspace=config.workspace,
        state_dir=config.state_dir,
        **options,
    )


@contextlib.asynccontextmanager
async def running(channel: TelegramChannel) -> AsyncIterator[TelegramChannel]:
    """Run the channel until the block ends, then cancel it and wait for its clean stop."""
    task = asyncio.create_task(channel.run())
    try:
        async with asyncio.timeout(WAIT):
            up = asyncio.ensure_future(channel.ready.wait())
            try:
                await asyncio.wait({task, up}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                up.cancel()
        if task.done():
            task.result()  # its error, if it failed to connect
            raise AssertionError("the channel's run() returned before it connected")
        yield channel
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert not channel.connected
