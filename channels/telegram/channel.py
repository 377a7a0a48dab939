"""The Telegram channel: python-telegram-bot long polling (or a webhook) in, HTML replies out.

Every update admission lets in is journaled in the inbox (channels/inbox.py) before Telegram hears
that it arrived, and replayed at the next start if the process died before handling it; one it
refuses is never written, so nothing of a stranger's text reaches the disk. This module owns
the PTB lifecycle and a message's way from update to turn, each message's work a task of
`channels.tasks`; the other `channels/telegram/` modules hold the parts (updates, mentions, media,
inbound messages, button presses, delivery, state). Those modules are the only ones that import
`telegram`; of ours they import `gateway.bus`, `memory.fileio` and the `channels/` root modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, cast

from telegram import Bot, CallbackQuery, Message, Update
from telegram.ext import ApplicationBuilder, ContextTypes, TypeHandler
from telegram.request import HTTPXRequest

from channels.admission import Decision, Request, Verdict
from channels.base import ChatCommands
from channels.errors import TelegramConfigError
from channels.inbox import Inbox, Json, settle
from channels.pairing import PairingStore
from channels.reception import Reception, Step
from channels.tasks import MessageTasks
from channels.telegram.connect import (
    App,
    file_url,
    register_commands,
    retrying,
    start_updates,
    stop_updates,
)
from channels.telegram.delivery import Target, TelegramDelivery
from channels.telegram.inbound import press_message, read_message
from channels.telegram.media import attachments
from channels.telegram.mentions import Addressing, admission_request
from channels.telegram.presses import answer_press, close_keyboard, read_press
from channels.telegram.state import UpdateCursor
from channels.telegram.updates import UpdateQueue, UpdatesRequest, read_update, update_date
from gateway.bus import Handler, InboundMessage, OutboundMessage
from gateway.config.models import TelegramConfig

log = logging.getLogger(__name__)

UNSUPPORTED = "I can only read text, photos, voice messages and files."
# Admission's request and decision, and how the message addresses the bot; None: not a person's
# message (a channel post).
Judged = tuple[Request, Decision, Addressing] | None


class TelegramChannel:
    """A Telegram bot serving allowed users, owning the python-telegram-bot lifecycle in `run()`."""

    name = "telegram"

    def __init__(
        self,
        handler: Handler,
        settings: TelegramConfig,
        *,
        workspace: Path,
        state_dir: Path,
        pairing: PairingStore | None = None,
        shutdown_grace: float = 10.0,
        commands: ChatCommands | None = None,
    ) -> None:
        """`settings` come validated (URLs, listen address); the token, whose variable commands
        such as `memgate init` may leave unset, and the webhook's needs are checked here."""
        token = settings.token
        if ":" not in token:
            raise TelegramConfigError(
                "channels.telegram.token: expected a BotFather token like 123:ABC…"
            )
        if settings.webhook_url and importlib.util.find_spec("tornado") is None:
            raise TelegramConfigError("channels.telegram.webhook_url: webhook mode needs "
                             "python-telegram-bot[webhooks] (tornado) installed")  # fmt: skip
        self._handler = handler
        self._settings = settings
        self._token = token
        self._commands = commands or ChatCommands()
        self._reception = Reception(self.name, settings, pairing)
        self._base_file_url = settings.base_file_url or file_url(settings.base_url)
        self._workspace = Path(workspace)
        self._state_dir = Path(state_dir)
        self._webhook_secret = settings.webhook_secret or secrets.token_urlsafe(32)
        self._grace = shutdown_grace
        self._app: App | None = None
        self._started = False
        self._up = asyncio.Event()  # set while connected
        self._bot_id = int(token.split(":", 1)[0]) if token.split(":", 1)[0].isdigit() else 0
        self._bot_username = ""
        self._cursor = UpdateCursor(self._state_dir / f"telegram-{self._bot_id}.json")
        self._tasks = MessageTasks(self.name)
        self._tails: dict[Target, asyncio.Event] = {}
        self._delivery = TelegramDelivery(self._running_bot)
        self._inbox: Inbox | None = None
        self._judged: dict[int, Judged] = {}  # admission decided on arrival, until taken

    def set_access(self, *, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        """Replace who may talk to the bot; the next message is judged by the new settings."""
        self._reception.set_access(allow_from, dm_policy, group_policy)

    @property
    def connected(self) -> bool:
        """True while updates are being received (polling or the webhook is up)."""
        return self._up.is_set()

    @property
    def ready(self) -> asyncio.Event:
        """Set while connected: what a message due at start (a reminder) waits on."""
        return self._up

    # -- lifecycle --------------------------------------------------------------------------------
    async def run(self) -> None:
        """Connect, serve updates until cancelled, then stop taking updates, give running turns
        the grace, and close, in that order."""
        if self._started:
            raise RuntimeError("TelegramChannel.run() was already started")
        self._started = True
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(log.info, "telegram stopped")  # last out, however run() ends
            app = self._build(stack)
            await retrying("connect", app.initialize)
            # Initialized above (retried); PTB's context manager shuts it down on the way out.
            await stack.enter_async_context(app)
            self._bot_id, self._bot_username = app.bot.id, app.bot.username or ""
            # Keyed by the bot's id (public, unlike the token): another bot starts afresh.
            self._cursor = UpdateCursor(self._state_dir / f"telegram-{self._bot_id}.json")
            await asyncio.to_thread(self._cursor.load)
            pending = await asyncio.to_thread(self._open_inbox)
            stack.callback(self._close_inbox)
            await register_commands(app.bot, self._commands.menu)
            async with self._tasks.running(self._grace):
                await app.start()
                try:
                    await self._replay(app, pending)
                    start = partial(start_updates, app, self._settings, self._webhook_secret)
                    await retrying("start", start)
                    self._up.set()
                    log.info(
                        "telegram connected bot=@%s mode=%s",
                        self._bot_username,
                        "webhook" if self._settings.webhook_url else "polling",
                    )
                    await asyncio.Event().wait()  # serve until cancelled
                finally:
                    self._up.clear()
                    await stop_updates(app)  # running turns get the grace after this

    def _build(self, stack: contextlib.AsyncExitStack) -> App:
        """The application on our own request objects, each closed by `stack` at the end: PTB's
        shutdown() closes them too, but does nothing after a failed initialize()."""
        requests = (HTTPXRequest(connection_pool_size=64), UpdatesRequest(connection_pool_size=1))
        for request in requests:
            stack.push_async_callback(request.shutdown)
        app = (
            ApplicationBuilder()
            .token(self._token)
            .base_url(self._settings.base_url)
            .base_file_url(self._base_file_url)
            .request(requests[0])
            .get_updates_request(requests[1])
            .update_queue(UpdateQueue(self._receive))
            .concurrent_updates(False)  # the callback only admits and queues; turns run as tasks
            .build()
        )
        app.add_handler(TypeHandler(Update, self._on_update))
        app.add_error_handler(self._on_error)
        self._app = app
        return app

    # -- updates ----------------------------------------------------------------------------------
    def _receive(self, item: object) -> bool:
        """Judge an update as it enters PTB's queue and journal it if admitted, before polling
        confirms it to Telegram (on its next getUpdates) and before the state file records it;
        False drops a repeat. Admission depends on the update alone, so deciding it here keeps a
        refused message's text off the disk and costs an admitted one no crash-safety."""
        inbox = self._inbox
        if not isinstance(item, Update) or inbox is None:
            return True  # PTB's stop signal
        if inbox.holds(item.update_id) or self._cursor.handled(item.update_id, update_date(item)):
            log.debug("telegram skipping handled update update_id=%s", item.update_id)
            return False
        try:
            judged = self._judge_update(item)
        except Exception:  # protects PTB's fetching: polling (or the webhook) calls this through
            # the update queue, and anything but a TelegramError there ends polling for good; an
            # update that cannot be judged is dropped and logged instead
            log.exception("telegram could not judge update update_id=%s", item.update_id)
            judged = None
        self._judged[item.update_id] = judged
        if judged is not None and judged[1].verdict is Verdict.ADMIT:
            inbox.append(item.to_dict())
        return True

    def _judge(self, message: Message) -> Judged:
        read = admission_request(message, self._bot_id, self._bot_username)
        return None if read is None else (read[0], self._reception.judge(read[0]), read[1])

    def _judge_update(self, update: Update) -> Judged:
        """A message's judgement, or a button press's: the presser's, as if they typed it."""
        if update.message is not None:
            return self._judge(update.message)
        query = update.callback_query
        press = read_press(query) if query is not None else None
        if press is None:
            return None
        return press.request, self._reception.judge(press.request), Addressing(True, False, "")

    async def _on_update(self, update: Update, _: ContextTypes.DEFAULT_TYPE) -> None:
        # Recorded, so Telegram redelivering it is not taken a second time; a replayed update may
        # be older than the newest one handled, and leaves the record as it is.
        if not self._cursor.handled(update.update_id, update_date(update)):
            self._cursor.record(update.update_id, update_date(update))
        await asyncio.to_thread(self._cursor.save)
        self._take(update)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """PTB's boundary around `_on_update`: taking an update failed (a bug: the agent answers
        a turn's own failures). Logged once; the update is finished, since taking it again at
        the next start would fail the same way."""
        update_id = update.update_id if isinstance(update, Update) else None
        log.error("telegram could not take update update_id=%s", update_id, exc_info=context.error)
        self._finish(update_id)

    async def _replay(self, app: App, pending: list[Json]) -> None:
        """Take again, oldest first, the updates a previous run received but never finished,
        through PTB's dispatch like a new one. The agent skips a message it already stored, so
        one whose turn had begun is not doubled."""
        if pending:
            log.info("telegram replaying unfinished updates count=%d", len(pending))
        for data in pending:
            update = read_update(data, app.bot)
            if update is None:
                self._finish(data.get("update_id"))
            else:
                await app.process_update(update)

    def _take(self, update: Update) -> None:
        """Start the work for a received update; one that needs none is finished at once."""
        if not self._tasks.open:
            return  # stopping: it stays in the inbox for the next start
        working = update.message is not None and self._admit(update.message, update.update_id)
        if update.callback_query is not None:
            working = self._admit_press(update, update.callback_query)
        if not working:
            self._finish(update.update_id)

    def _finish(self, update_id: Any) -> None:
        if self._inbox is not None and isinstance(update_id, int):
            self._inbox.finish(update_id)

    def _admit(self, message: Message, update_id: int) -> bool:
        """Act on admission's decision (taken on arrival; a replay judges again) and queue an
        admitted message in its chat's order. True when work was started that finishes the
        update in the inbox itself."""
        known = update_id in self._judged
        judged = self._judged.pop(update_id) if known else self._judge(message)
        if judged is None:
            return False
        request, decision, addressing = judged
        addressed, text = addressing.addressed, addressing.text
        thread = message.message_thread_id if message.is_topic_message else None
        target = Target(message.chat.id, thread)
        step = self._step(target, request, decision, text)
        if not step.turn:
            return False
        name = step.command.name if step.command is not None else ""
        if not text and next(attachments(message), None) is None:
            # A sticker, location, poll…: say so, rather than leave the sender wondering. Service
            # messages (a member joined, a pin) have no attachment and get nothing.
            if message.effective_attachment is not None and (addressed or not request.is_group):
                self._tasks.spawn(self.send, self._outbound(target, UNSUPPORTED))
            return False
        if name == "start" and self._commands.greeting:
            self._tasks.spawn(self.send, self._outbound(target, self._commands.greeting))
            return False
        previous = self._tails.get(target)
        done = self._tails[target] = asyncio.Event()
        self._tasks.spawn(self._intake, message, text, addressed, target, previous, done, update_id)
        return True

    def _admit_press(self, update: Update, query: CallbackQuery) -> bool:
        """A button pressed: Telegram hears at once that it arrived, and its command goes on as
        the presser's own message (see presses.py); True as for `_admit`."""
        if (bot := self._running_bot()) is not None:
            self._tasks.spawn(answer_press, bot, query.id)
        known = update.update_id in self._judged
        judged = self._judged.pop(update.update_id) if known else self._judge_update(update)
        press = read_press(query)
        if judged is None or press is None:
            return False
        target = Target(press.chat_id, press.thread_id)
        if not self._step(target, judged[0], judged[1], press.command).turn:
            return False
        inbound = press_message(press, self._reception.is_owner)
        self._tasks.spawn(self._pressed, inbound, target, update.update_id)
        return True

    async def _pressed(self, inbound: InboundMessage, target: Target, update_id: int) -> None:
        await self._turn(inbound, target, update_id)
        bot = self._running_bot()
        if inbound.sender_is_owner and bot is not None and inbound.message_id is not None:
            await close_keyboard(bot, target.chat_id, int(inbound.message_id))  # chosen

    def _step(self, target: Target, request: Request, decision: Decision, text: str) -> Step:
        """What follows admission's decision; a stranger's code or a /pair answered here."""
        step = self._reception.step(request, decision, text)
        if step.reply is not None:
            self._tasks.spawn(self.send, self._outbound(target, step.reply))
        if step.pair:
            self._tasks.spawn(self._answer_pair, target, request, decision, text)
        return step

    async def _answer_pair(
        self, target: Target, request: Request, decision: Decision, text: str
    ) -> None:
        reply = await self._reception.answer_pair(request, decision, text)
        await self.send(self._outbound(target, reply))

    async def _intake(
        self,
        message: Message,
        text: str,
        addressed: bool,
        target: Target,
        previous: asyncio.Event | None,
        done: asyncio.Event,
        update_id: int,
    ) -> None:
        """Download media and build the inbound message, one at a time per chat, then start the
        turn; turns start in arrival order but run concurrently, so a /stop is never stuck.
        Cancelled (at shutdown), or failed (downloads fail softly, so a bug, which the tasks'
        supervisor logs), the update stays unfinished in the inbox and is replayed."""
        try:
            if previous is not None:
                await previous.wait()
            owner = self._reception.is_owner
            inbound = await read_message(message, text, addressed, target, self._workspace, owner)
            if inbound is None:
                self._finish(update_id)
            else:
                # The agent logs the one INFO line per message; this detail is for debugging.
                log.debug(
                    "telegram message key=%s sender_id=%s media=%d",
                    inbound.key,
                    inbound.sender_id,
                    len(inbound.media),
                )
                self._tasks.spawn(self._turn, inbound, target, update_id)
        finally:
            done.set()
            if self._tails.get(target) is done:
                del self._tails[target]

    async def _turn(self, inbound: InboundMessage, target: Target, update_id: int) -> None:
        live = None
        if self._settings.streaming == "on":
            answers = int(inbound.message_id) if inbound.is_group and inbound.message_id else None
            live = self._delivery.live(
                target, private=not inbound.is_group, reply_to=answers, **self._shown_of(update_id)
            )
        with self._delivery.typing_while(target, self._tasks):
            if live is None:
                reply = await self._handler(inbound)  # it answers its own errors
            else:
                async with live.showing():
                    reply = await self._handler(inbound, stream=live)
        if reply is not None:
            if target.thread_id and "thread_id" not in reply.metadata:
                meta = {**reply.metadata, "thread_id": str(target.thread_id)}
                reply = replace(reply, metadata=meta)
            if inbound.is_group and reply.reply_to is None:
                reply = replace(reply, reply_to=inbound.message_id)
        # Each part of the answer noted in the inbox as it goes: a replay after a kill between
        # two parts sends only those not yet out.
        send: Callable[[OutboundMessage], Awaitable[bool]] = partial(
            self._delivery.send_pieces, **self._progress_of(update_id)
        )
        if live is not None:
            shown = live

            async def send(message: OutboundMessage) -> bool:
                return await self._delivery.finish_live(
                    shown, target.chat_id, message, **self._progress_of(update_id)
                )

            if reply is None:
                await self._delivery.finish_live(live, target.chat_id, None)
        await settle(reply, lambda: self._finish(update_id), send)

    def _shown_of(self, update_id: int) -> dict[str, Any]:
        """`shown` and `on_shown` for the live reply to `update_id`: its messages are recorded
        in the inbox as Telegram makes them, so that a replay finishes the answer in them."""
        inbox = self._inbox
        if inbox is None:
            return {}
        return {
            "shown": inbox.live_messages(update_id),
            "on_shown": partial(inbox.record_live, update_id),
        }

    def _progress_of(self, update_id: int) -> dict[str, Any]:
        """`skip` and `progress` for sending the answer to `update_id` (see send_pieces)."""
        inbox = self._inbox
        if inbox is None:
            return {}
        return {
            "skip": inbox.parts_sent(update_id),
            "progress": partial(inbox.part_sent, update_id),
        }

    # -- sending ----------------------------------------------------------------------------------
    async def send(self, message: OutboundMessage) -> bool:
        """Send a reply as HTML pieces within Telegram's limit; failures are logged, not raised.

        True when every piece reached Telegram (a scheduled job retries on False). Then the reply
        is no longer owed (taken by Telegram, or refused for good and logged).
        """
        sent = await self._delivery.send_pieces(message)
        await message.sent()
        return sent

    def _running_bot(self) -> Bot | None:
        return None if self._app is None else cast(Bot, self._app.bot)  # PTB types it as Any

    def _outbound(self, target: Target, text: str) -> OutboundMessage:
        meta = {"thread_id": str(target.thread_id)} if target.thread_id else {}
        return OutboundMessage(self.name, str(target.chat_id), text, metadata=meta)

    # -- the inbox --------------------------------------------------------------------------------
    def _open_inbox(self) -> list[Json]:
        """Open the inbox journal (blocking); returns the updates left unfinished last time."""
        self._inbox = Inbox(self._state_dir / f"telegram-{self._bot_id}-inbox.jsonl")
        return self._inbox.open_or_log()

    def _close_inbox(self) -> None:
        if self._inbox is not None:
            self._inbox.close()
