"""A fake as a server of its own (`python -m tests.fakes.<name>`), e.g. a unit beside memgate
under systemd; it serves until interrupted (Ctrl-C) or killed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import web

Start = Callable[[], Awaitable[tuple[web.AppRunner, str]]]


def serve_until_interrupted(start: Start) -> None:
    """Start the fake with `start` (its runner and a line to print), serve until interrupted."""

    async def serve() -> None:
        runner, banner = await start()
        print(banner, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
