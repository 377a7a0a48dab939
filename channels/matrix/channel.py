"""The Matrix adapter: /sync events turned into `InboundMessage`s, replies sent back.

Every admitted message is journaled in the inbox, then the since-token is saved, before the
message waits for its turn: a kill after the journal and before the token replays the events from
the homeserver, and those the inbox already holds are recognised by their event id. A message is
finished in the inbox once handled. Rooms are groups (answered on mention or reply); a room of two
is a DM; a thread is its own session. Encrypted rooms are not read: the bot says so once in each.
The `channels/matrix/` modules are the only ones that import `nio`; of ours they import
`gateway.bus`, `gateway.config.models`, `memory.fileio` and the `channels/` root modules.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import nio

from channels.admission import Decision, Request
from channels.base import split_message
from channels.errors import MatrixChannelError
from channels.inbox import Inbox, Json, Send, settle
from channels.live import LiveReply, Pacer
from channels.matrix.connect import NETWORK_ERRORS, log_in, new_client
from channels.matrix.events import (
    ID_FIELD,
    Message,
    Sequence,
    inbound_from,
    inbox_record,
    read_message,
)
from channels.matrix.live import MESSAGE_LIMIT, Target, live_reply, post
from channels.matrix.media import download, keep_typing
from channels.matrix.state import SyncPosition, file_stem
from channels.pairing import PairingStore
from channels.reception import Reception
from channels.seen import Seen
from channels.tasks import MessageTasks
from gateway.bus import Handler, InboundMessage, OutboundMessage
from gateway.config.models import MatrixConfig

log = logging.getLogger(__name__)

_SYNC_BACKOFF = (1.0, 60.0)  # first and largest delay between failed /syncs
# The bot's posts it remembers: a reply to an older one must mention it to address it.
POSTS_KEPT = 10_000
ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, and I cannot read encrypted messages. Talk to me in an "
    "unencrypted room or DM."
)


class MatrixChannel:
    """A Matrix bot: DMs, rooms per `group_policy`, and threads, each its own session."""

    name = "matrix"

    def __init__(
        self,
        handler: Handler,
        settings: MatrixConfig,
        *,
        workspace: Path,
        state_dir: Path | None = None,
        pairing: PairingStore | None = None,
        shutdown_grace: float = 0.0,
        max_media_bytes: int = 25 * 1024 * 1024,
    ) -> None:
        if not settings.user_id:
            raise MatrixChannelError("channels.matrix.user_id: must not be empty")
        self._handler = handler
        self._settings = settings
        self._streaming = settings.streaming == "on"
        self._pacer = Pacer()
        self._reception = Reception(self.name, settings, pairing)
        self._workspace = Path(workspace)
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._max_media_bytes = max_media_bytes
        self._shutdown_grace = shutdown_grace
        self._client: nio.AsyncClient | None = None
        self._started = False
        self._up = asyncio.Event()
        self._tasks = MessageTasks(self.name)
        self._inbox: Inbox | None = None
        # Event ids journaled lately (at the start: those the inbox holds unfinished), which a
        # /sync from a token saved before them could bring again.
        self._journaled = Seen()
        self._sequence = Sequence()
        self._position: SyncPosition | None = None
        self._mine = Seen(size=POSTS_KEPT)  # event ids the bot sent (replies address it)
        self._my_name = ""

    def __repr__(self) -> str:  # never risk the token in a log line
        return f"<MatrixChannel user_id={self._settings.user_id} connected={self.connected}>"

    @property
    def connected(self) -> bool:
        """True from the first successful /sync until one fails."""
        return self._up.is_set()

    @property
    def ready(self) -> asyncio.Event:
        return self._up

    def set_access(self, *, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        """Replace who may talk to the bot; the next message is judged by the new settings."""
        self._reception.set_access(allow_from, dm_policy, group_policy)

    async def run(self) -> None:
        """Log in and /sync until cancelled. On cancellation no new message is taken; turns
        already running get `shutdown_grace` seconds to finish, then the client closes."""
        if self._started:
            raise RuntimeError("MatrixChannel.run() was already started")
        self._started = True
        client = self._client = new_client(self._settings)
        try:
            async with self._tasks.running(self._shutdown_grace):
                try:
                    await log_in(client, self._settings, self._state_dir)
                    await self._learn_name(client)
                    for record in await asyncio.to_thread(self._open_state, client.user_id):
                        self._tasks.spawn(self._replay, record)
                    await self._sync_forever(client)
                finally:
                    self._up.clear()
        finally:
            await client.close()
            if self._inbox is not None:
                self._inbox.close()

    async def send(self, message: OutboundMessage) -> bool:
        """Send `message` (a reply, or a job's message) in parts below the event size limit; a
        failure is logged, never raised. True when every part went out."""
        outcome = await self._send_parts(message)
        if outcome is not None:
            await message.sent()
        return bool(outcome)

    async def _send_parts(self, message: OutboundMessage) -> bool | None:
        """True all sent, False given up (logged), None not running."""
        client = self._client
        if client is None or not client.access_token:
            log.warning("matrix send while not running room_id=%s", message.chat_id)
            return None
        target = Target(message.chat_id, message.metadata.get("thread_id"), message.reply_to)
        # No buttons on Matrix: a message that offers some ends with the commands to type.
        pieces = split_message(message.text_with_commands(), MESSAGE_LIMIT)
        for index, piece in enumerate(pieces):
            # The stored answer's id as transaction id: a resend after a restart (same device)
            # gets the event the homeserver already made, not a second one.
            tx_id = f"memgate-{message.reply_id}-{index}" if message.reply_id else None
            made = await post(client, target, piece, first=index == 0, tx_id=tx_id)
            if made is None:
                return False  # the rest of a reply without its middle would mislead
            self._mine.add(made)
        return True

    # -- /sync ------------------------------------------------------------------------------------

    async def _sync_forever(self, client: nio.AsyncClient) -> None:
        assert self._position is not None
        timeout_ms = int(self._settings.sync_timeout * 1000)
        failures = 0
        while True:
            first = self._position.since is None
            try:
                response = await client.sync(
                    timeout=0 if first else timeout_ms, since=self._position.since
                )
            except NETWORK_ERRORS as exc:
                response = None
                error = type(exc).__name__
            if isinstance(response, nio.SyncResponse):
                failures = 0
                if not self._up.is_set():
                    log.info("matrix connected user_id=%s", client.user_id)
                self._up.set()
                await self._take(client, response, first)
                continue
            if isinstance(response, nio.SyncError):
                if response.status_code in ("M_UNKNOWN_TOKEN", "M_FORBIDDEN"):
                    raise MatrixChannelError(
                        f"the homeserver ended the login ({response.status_code}: "
                        f"{response.message})"
                    )
                error = f"{response.status_code}: {response.message}"
            self._up.clear()
            first_delay, largest = _SYNC_BACKOFF
            delay = min(largest, first_delay * 2**failures) * random.uniform(0.5, 1.0)
            failures += 1
            log.warning("matrix sync failed error=%s retry_in=%.1fs", error, delay)
            await asyncio.sleep(delay)

    async def _take(self, client: nio.AsyncClient, response: nio.SyncResponse, first: bool) -> None:
        """Journal what a /sync brought, save its token, then start the turns."""
        assert self._position is not None
        work: list[tuple[Message, Request, int | None]] = []
        for room_id, info in response.rooms.join.items():
            for event in info.timeline.events:
                taken = self._judge(client, room_id, event.source, first)
                if taken is not None:
                    work.append(taken)
        if first and response.rooms.join:
            log.info("matrix first sync: earlier messages are not answered")
        notices = [] if first else self._encrypted_rooms(client, response)
        self._position.since = response.next_batch
        if self._inbox is not None:
            self._inbox.sync()
        # After the journal's fsync: the token never gets ahead of what the inbox holds.
        await asyncio.to_thread(self._position.save)
        for invite in self._invites(response):
            self._tasks.spawn(self._join, invite)
        for room_id in notices:
            self._tasks.spawn(self.send, OutboundMessage(self.name, room_id, ENCRYPTED_NOTICE))
        for message, request, seq in work:
            self._tasks.spawn(self._handle, message, request, seq)

    def _judge(
        self, client: nio.AsyncClient, room_id: str, source: dict[str, Any], first: bool
    ) -> tuple[Message, Request, int | None] | None:
        """Admission for one timeline event: the message and its request when it goes to the
        agent (journaled), else None (a stranger's code or an owner's /pair start here)."""
        me = client.user_id
        if source.get("sender") == me or first:
            return None  # our own, or history from before the bot's first start
        message = read_message(room_id, source, me, self._my_name, self._mine)
        if message is None or message.event_id in self._journaled:
            return None
        room = client.rooms.get(room_id)
        is_group = room is None or room.member_count > 2
        name = room.user_name(message.sender) if room is not None else None
        request = Request(
            message.sender,
            # allow_from lists Matrix ids, which begin with "@" as the @names of other platforms
            # do; an id is never given up to someone else, so it may match either way.
            username=message.sender,
            name=name or message.sender,
            is_group=is_group,
            addressed=message.addressed,
        )
        decision = self._reception.judge(request)
        step = self._reception.step(request, decision, message.text)
        if step.reply is not None:
            self._tasks.spawn(self.send, OutboundMessage(self.name, room_id, step.reply))
        if step.pair:
            self._tasks.spawn(self._answer_pair, message, request, decision)
        if not step.turn or (not message.text and message.attachment is None):
            return None
        seq = None
        if self._inbox is not None:
            seq = self._sequence.next()
            self._inbox.append(inbox_record(seq, message, is_group, request.name))
            self._journaled.add(message.event_id)
        return message, request, seq

    def _encrypted_rooms(self, client: nio.AsyncClient, response: nio.SyncResponse) -> list[str]:
        """Encrypted rooms with an event for us that were never told we cannot read them."""
        assert self._position is not None
        rooms = []
        for room_id, info in response.rooms.join.items():
            encrypted = any(
                e.source.get("type") == "m.room.encrypted" for e in info.timeline.events
            )
            if encrypted and room_id not in self._position.told_encrypted:
                log.warning(
                    "matrix encrypted room: its messages cannot be read room_id=%s "
                    "(memgate does not support end-to-end encryption; see the README)",
                    room_id,
                )
                self._position.told_encrypted.add(room_id)
                rooms.append(room_id)
        return rooms

    def _invites(self, response: nio.SyncResponse) -> list[str]:
        """Rooms to join: any an owner invited the bot to, and a DM anyone opens while DMs are
        served to strangers (pairing or open: the DM is where they get their code). Other
        invites are left unanswered (logged)."""
        me = self._settings.user_id
        strangers_dm = self._reception.gate.rules.dm_policy in ("pairing", "open")
        accepted = []
        for room_id, info in response.rooms.invite.items():
            invite = next(
                (
                    e
                    for e in info.invite_state
                    if isinstance(e, nio.InviteMemberEvent)
                    and e.state_key == me
                    and e.membership == "invite"
                ),
                None,
            )
            inviter = invite.sender if invite is not None else None
            direct = invite is not None and bool(invite.content.get("is_direct"))
            if inviter is not None and (self._is_owner(inviter) or (direct and strangers_dm)):
                accepted.append(room_id)
            else:
                log.info("matrix invite ignored room_id=%s inviter=%s", room_id, inviter or "-")
        return accepted

    async def _join(self, room_id: str) -> None:
        client = self._client
        assert client is not None
        try:
            response = await client.join(room_id)
        except NETWORK_ERRORS as exc:
            log.warning("matrix join failed room_id=%s error=%r", room_id, exc)
            return
        if isinstance(response, nio.JoinError):
            log.warning("matrix join refused room_id=%s error=%s", room_id, response.message)
        else:
            log.info("matrix joined room on an owner's invite room_id=%s", room_id)

    async def _answer_pair(self, message: Message, request: Request, decision: Decision) -> None:
        reply = await self._reception.answer_pair(request, decision, message.text)
        await self.send(OutboundMessage(self.name, message.room_id, reply))

    # -- one message ------------------------------------------------------------------------------

    async def _handle(self, message: Message, request: Request, seq: int | None) -> None:
        client = self._client
        assert client is not None
        text = message.text
        media: tuple[str, ...] = ()
        if message.attachment is not None:
            text, media = await download(client, message, self._workspace, self._max_media_bytes)
        inbound = InboundMessage(
            channel=self.name,
            chat_id=message.room_id,
            sender_id=message.sender,
            text=text,
            sender_name=request.name,
            media=media,
            is_group=request.is_group,
            sender_is_owner=self._is_owner(message.sender),
            mentioned=message.addressed,
            message_id=message.event_id,
            session_key=message.session_key,
        )
        await self._turn(inbound, message.thread, seq)

    async def _turn(self, inbound: InboundMessage, thread: str | None, seq: int | None) -> None:
        client = self._client
        assert client is not None
        # In a room the answer replies to the question; in a DM it needs no reference.
        target = Target(inbound.chat_id, thread, inbound.message_id if inbound.is_group else None)
        live = self._live(target, seq)
        async with asyncio.TaskGroup() as group:
            typing = group.create_task(keep_typing(client, inbound.chat_id))
            if live is None:
                reply = await self._handler(inbound)
            else:
                async with live.showing():
                    reply = await self._handler(inbound, stream=live)
            typing.cancel()
        if reply is not None:
            meta = {**reply.metadata, "thread_id": thread} if thread else reply.metadata
            answers = reply.reply_to or target.reply_to
            reply = replace(reply, metadata=meta, reply_to=answers)
        send: Send = self._send_parts
        if live is not None and not live.untouched:
            send = live.finish_reply
            if reply is None:
                await live.finish(None)
        await settle(reply, lambda: self._finish(seq), send)
        log.debug(
            "matrix message handled room_id=%s replied=%s", inbound.chat_id, reply is not None
        )

    def _live(self, target: Target, seq: int | None) -> LiveReply | None:
        client = self._client
        if not self._streaming or client is None:
            return None
        inbox = self._inbox
        if inbox is None or seq is None:
            return live_reply(client, target, self._pacer)
        on_shown = partial(inbox.record_live, seq)
        return live_reply(client, target, self._pacer, inbox.live_messages(seq), on_shown)

    def _finish(self, seq: int | None) -> None:
        if self._inbox is not None and seq is not None:
            self._inbox.finish(seq)

    # -- the state folder -------------------------------------------------------------------------

    def _open_state(self, user_id: str) -> list[Json]:
        """Open the inbox and read the sync position (blocking); the messages left unanswered
        last time, oldest first."""
        if self._state_dir is None:
            self._position = SyncPosition(None)  # kept in memory only
            return []
        stem = file_stem(user_id)
        self._position = SyncPosition(self._state_dir / f"{stem}-sync.json")
        self._position.load()
        self._inbox = Inbox(
            self._state_dir / f"{stem}-inbox.jsonl", id_field=ID_FIELD, label=self.name
        )
        pending = self._inbox.open_or_log()
        self._journaled = Seen(str(record.get("event_id")) for record in pending)
        floor = max((int(record[ID_FIELD]) for record in pending), default=0)
        self._sequence = Sequence(floor)
        if pending:
            log.info("matrix answering messages left from the last run count=%d", len(pending))
        return pending

    async def _replay(self, record: Json) -> None:
        """Answer a journaled message as if it had just arrived (its file is only named)."""
        try:
            seq = int(record[ID_FIELD])
            inbound = inbound_from(record, self._is_owner(str(record["sender_id"])))
        except (KeyError, TypeError, ValueError):
            log.warning("matrix inbox entry unreadable, dropped entry=%s", record.get(ID_FIELD))
            return
        await self._turn(inbound, record.get("thread"), seq)

    def _is_owner(self, user_id: str) -> bool:
        return self._reception.is_owner(user_id, user_id)  # see the Request in _judge

    async def _learn_name(self, client: nio.AsyncClient) -> None:
        """The bot's display name, which people type to mention it."""
        try:
            response = await client.get_displayname(client.user_id)
        except NETWORK_ERRORS:
            return
        if isinstance(response, nio.ProfileGetDisplayNameResponse):
            self._my_name = response.displayname or ""
