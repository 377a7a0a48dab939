"""A reply shown while it is written: the `ReplyStream` a chat channel hands the agent.

Writes only gather text; `run()` shows the latest state on the platform at most once per `every`
seconds (within the flood limits), through a `Surface` the platform adapter provides: a draft
where the platform has them, else a message sent once there is enough to read and then edited.
A text that outgrows one message is finished there and goes on in a new one. `finish()` puts the
whole reply in place, rendered as any reply is.

The ids of the messages a reply puts in the chat are reported (`on_shown`) as soon as the platform
returns them, so that the channel can record them; a reply made again after a restart with those
ids (`shown`) writes into them, in order, before it sends any new message, and deletes those it
no longer needs. A message that can no longer be edited (deleted, too old, no rights) is deleted
where the platform allows and replaced by a new one. Imports only `gateway.bus` of ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

from gateway.bus import STOPPED_MARK, OutboundMessage

log = logging.getLogger(__name__)

EVERY = 1.0  # seconds between two updates of one reply: Telegram's ~1 edit a second per chat
FIRST_CHARS = 200  # a message (not a draft) is first sent with this much text…
FIRST_WAIT = 1.0  # …or this many seconds after the text began, whichever comes first


class Pacer:
    """At most one live call a second per chat, across all the replies to it."""

    def __init__(self, every: float = EVERY) -> None:
        self._every = every
        self._last: dict[int, float] = {}

    async def turn(self, chat_id: int, *, wait: bool, not_before: float = 0.0) -> bool:
        """Whether a live reply may update a message in `chat_id` now (`not_before`: a loop time
        set by flood control). `wait`: wait for the turn rather than skip it. New messages of a
        finished text are not paced here: they go out as any reply's pieces do."""
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            ready = max(not_before, self._last.get(chat_id, -self._every) + self._every)
            if now >= ready:
                self._last[chat_id] = now
                return True
            if not wait:
                return False
            await asyncio.sleep(ready - now)


class Surface(Protocol):
    """How one platform shows a reply: its split, drafts, messages and edits.

    Messages are the platform's ids. `final` text is rendered as a finished reply is (Telegram's
    HTML with its plain fallback); otherwise it is shown as it stands. Failures are logged by the
    surface, never raised.
    """

    def split(self, text: str) -> list[str]:
        """The parts a whole text is sent as, each one message."""
        ...

    async def preview(self, text: str) -> bool:
        """Show `text` as a draft; False when the platform has none here (messages then)."""
        ...

    async def post(self, text: str, *, final: bool, first: bool) -> int | None:
        """Send a new message (`first`: the reply's first, which answers the person's); its id,
        or None when it did not go out."""
        ...

    async def edit(self, message: int, text: str, *, final: bool) -> bool:
        """Replace a sent message's text; False when that failed (`final`), or (not `final`)
        when the message can no longer be edited: deleted, too old, no rights."""
        ...

    async def delete(self, message: int) -> None:
        """Delete a message of the reply that is no longer needed, where the platform allows."""
        ...


class LiveReply:
    """One reply on its way: a `ReplyStream` for the agent, shown through a `Surface`."""

    def __init__(
        self,
        surface: Surface,
        *,
        drafts: bool = False,
        every: float = EVERY,
        first_chars: int = FIRST_CHARS,
        first_wait: float = FIRST_WAIT,
        clock: Callable[[], float] | None = None,
        shown: Sequence[int] = (),
        on_shown: Callable[[list[int]], None] | None = None,
    ) -> None:
        """`shown`: the messages this reply had put in the chat before a restart, in order;
        `on_shown` hears the reply's messages (all of them, in order) each time they change."""
        self._surface = surface
        self._drafts = drafts and not shown  # a reply already in messages stays there
        self._every = every
        self._first_chars = first_chars
        self._first_wait = first_wait
        self._text = ""  # the answer since the last tool note
        self._note = ""  # what the tools are doing, shown while there is no answer text
        self._dirty = False
        self._closed = False
        self._changed = asyncio.Condition()
        self._current: int | None = None  # the message being edited
        self._used: list[int] = []  # this reply's messages in the chat, in order
        self._spare: list[int] = list(shown)  # messages from before a restart, not reused yet
        self._on_shown = on_shown
        self._finished: list[str] = []  # parts already sent as finished messages
        self._shown = bool(shown)  # a draft, a message or an edit went out for this reply

    # -- ReplyStream -------------------------------------------------------------------------------
    async def write(self, text: str) -> None:
        self._text += text
        self._note = ""
        await self._touch()

    async def status(self, note: str) -> None:
        self._text, self._note = "", note
        # Messages this text finished stay as they are; the answer after the tools starts anew.
        self._finished = []
        await self._touch()

    async def _touch(self) -> None:
        self._dirty = True
        async with self._changed:
            self._changed.notify_all()

    # -- showing -----------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def showing(self) -> AsyncIterator[LiveReply]:
        """Show updates while the block runs; on leaving, the update in flight completes (so it
        cannot land after the final text) and no other starts."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._run())
            try:
                yield self
            finally:
                self._closed = True
                async with self._changed:
                    self._changed.notify_all()

    async def _run(self) -> None:
        while await self._rest(None, lambda: self._dirty):
            # A message that will be edited starts with something worth reading.
            opening = not self._drafts and self._current is None and not self._note
            if opening and not await self._rest(self._first_wait, self._enough):
                return
            self._dirty = False
            self._shown = True
            await self._show()
            if not await self._rest(self._every, lambda: False):
                return

    def _enough(self) -> bool:
        return len(self._text) >= self._first_chars

    async def _rest(self, seconds: float | None, done: Callable[[], bool]) -> bool:
        """Wait until `done()` or `seconds` pass; False as soon as the reply is closed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds), self._changed:
                await self._changed.wait_for(lambda: self._closed or done())
        return not self._closed

    async def _show(self) -> None:
        if self._note and not self._text.strip():
            await self._put(self._note)
            return
        parts = await asyncio.to_thread(self._surface.split, self._text)
        if not parts:
            return
        # Every part but the last is complete: more text follows it.
        for part in parts[len(self._finished) : -1]:
            await self._commit(part)
        await self._put(parts[-1])

    async def _put(self, text: str) -> None:
        """Show the part being written: as a draft, or in the message being edited."""
        if self._drafts:
            if await self._surface.preview(text):
                return
            self._drafts = False
        if self._current is not None:
            if await self._surface.edit(self._current, text, final=False):
                return
            await self._drop(self._current)  # gone or refused: the text goes on in a new one
        self._current = await self._open(text, final=False)

    async def _commit(self, part: str) -> bool:
        """Send `part` as a finished message, in the message being edited if there is one."""
        sent = False
        if self._current is not None:
            sent = await self._surface.edit(self._current, part, final=True)
            if not sent:
                await self._drop(self._current)
            self._current = None
        if not sent:
            sent = await self._open(part, final=True) is not None
        self._finished.append(part)
        return sent

    async def _open(self, text: str, *, final: bool) -> int | None:
        """A message now showing `text`: the next one kept from before a restart that can still
        be edited, else a new one. None when nothing went out."""
        while self._spare:
            message = self._spare.pop(0)
            if await self._surface.edit(message, text, final=final):
                self._used.append(message)
                return message
            await self._surface.delete(message)  # where it still exists: it is left behind
            self._report()
        made = await self._surface.post(text, final=final, first=not self._used)
        if made is not None:
            self._used.append(made)
            self._report()
        return made

    async def _drop(self, message: int) -> None:
        """Give up a message of this reply that refused an edit: delete it where allowed."""
        await self._surface.delete(message)
        self._used.remove(message)
        self._report()

    def _report(self) -> None:
        if self._on_shown is not None:
            self._on_shown([*self._used, *self._spare])

    # -- the end -----------------------------------------------------------------------------------
    @property
    def untouched(self) -> bool:
        """Nothing was shown yet: the reply can be sent as any reply is."""
        return not self._shown

    async def finish_reply(self, reply: OutboundMessage) -> bool:
        """`finish` with the reply's text: a channel's send for a reply that was shown."""
        return await self.finish(reply.text_with_commands())  # a shown reply takes no buttons

    async def finish(
        self, text: str | None, *, progress: Callable[[int], None] | None = None
    ) -> bool:
        """Put the whole reply in place of what was shown; True when all of it went out.

        Parts already sent as finished messages are not sent again when the reply begins with
        them. With no reply (a turn stopped before it wrote anything), a message left showing a
        tool note is marked stopped. `progress(n)`: the first n parts are out, but the last.
        """
        if text is None:
            # Messages kept from before a restart are left as they are: the turn ended before
            # (a later message followed it) or its answer is already there.
            if self._current is not None:
                await self._surface.edit(self._current, STOPPED_MARK, final=True)
            return True
        parts = await asyncio.to_thread(self._surface.split, text)
        done = len(self._finished)
        if parts[:done] != self._finished:
            # The reply is not what streamed (an error after some text): send it whole.
            log.debug("live reply differs from what was shown; sending it whole")
            done = 0
        self._finished = []
        sent = True
        for index in range(done, len(parts)):
            if progress is not None and index > 0:
                progress(index)  # parts before `index` are out: a restart sends from here
            sent = await self._commit(parts[index]) and sent
        for message in self._spare:
            await self._surface.delete(message)  # left over from a longer text: it would mislead
        if self._spare:
            self._spare = []
            self._report()
        return sent
