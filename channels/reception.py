"""The admission steps every chat channel shares: the gate's verdict on a message, then what
follows it: a stranger's pairing code, an owner's `/pair`, or the message going on to its turn.

Each adapter reads its platform's message into an admission `Request` (who, their name, a group
or not, addressed or not) and calls `Reception`; sending, journaling and tasks stay the
adapter's. Imports `channels.admission`, `channels.base`, `channels.errors` and
`channels.pairing` of ours; no SDK.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from channels.admission import AccessSettings, Decision, Gate, Request, Verdict
from channels.base import Command, parse_command
from channels.errors import PairingError
from channels.pairing import PairingStore, pair_command, stranger_reply

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Step:
    """What a channel does with a judged message: send `reply` at once (a stranger's pairing
    code), answer an owner's `/pair` (`pair`, through `Reception.answer_pair`), or hand it to
    the agent (`turn`); none of them: drop it. `command` is the message's command, if any."""

    decision: Decision
    command: Command | None = None
    reply: str | None = None
    pair: bool = False

    @property
    def turn(self) -> bool:
        return self.decision.verdict is Verdict.ADMIT and not self.pair


class Reception:
    """A chat channel's admission: its gate, and the pairing steps that follow a verdict."""

    def __init__(
        self, channel: str, settings: AccessSettings, pairing: PairingStore | None
    ) -> None:
        """`settings`: the channel's access keys; `pairing`: the store, None without pairing."""
        self._channel = channel
        self._pairing = pairing
        approvals = pairing.is_approved if pairing is not None else None
        self.gate = Gate.from_settings(channel, settings, approvals)

    def set_access(self, allow_from: Iterable[str], dm_policy: str, group_policy: str) -> None:
        """Judge the next message by these settings (a reload); AccessError leaves the old ones."""
        self.gate.set_rules(allow_from, dm_policy, group_policy)

    def is_owner(self, sender_id: str, username: str | None = None) -> bool:
        return self.gate.is_owner(sender_id, username)

    def judge(self, request: Request) -> Decision:
        """The gate's decision, logged (see `Gate`)."""
        return self.gate.judge(request)

    def step(self, request: Request, decision: Decision, text: str) -> Step:
        """What follows `decision` on `request`, whose text (our mention removed) is `text`.

        Called in arrival order, so a stranger's burst of DMs gets one reply, not one per
        message; the pairing file is written only when a reply is due (a few times an hour at
        most), and nothing of a stranger's message is kept."""
        if decision.verdict is Verdict.PAIR:
            return Step(decision, reply=self._code_for(request))
        if decision.verdict is not Verdict.ADMIT:
            return Step(decision)
        command = parse_command(text)  # read as the agent reads its own
        pair = (
            command is not None
            and command.name == "pair"
            and not request.is_group
            and self._pairing is not None
        )
        return Step(decision, command, pair=pair)

    async def answer_pair(self, request: Request, decision: Decision, text: str) -> str:
        """The answer to `/pair` (the codes waiting) or `/pair CODE` (approve it), from an owner
        only; the file is read and written off the event loop."""
        assert self._pairing is not None
        store, sender_id, owner = self._pairing, request.sender_id, decision.owner
        return await asyncio.to_thread(pair_command, store, self._channel, sender_id, owner, text)

    def _code_for(self, request: Request) -> str | None:
        """A stranger's reply: their pairing code, at most once per REPLY_EVERY; None for
        silence (answered lately, too many waiting, or the store failed: logged)."""
        if self._pairing is None:
            return None
        try:
            answer = self._pairing.request(self._channel, request.sender_id, request.name)
        except (PairingError, OSError) as exc:  # pairing.json unreadable, or the disk refuses it
            log.error(
                "pairing failed channel=%s sender_id=%s error=%s",
                self._channel,
                request.sender_id,
                exc,
            )
            return None
        return stranger_reply(answer.code, self._channel) if answer.reply and answer.code else None
