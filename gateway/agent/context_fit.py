"""A model call that fits the server's context, not only memgate's count of it.

The budget's calibration (memory/calibration.py) learns the server's tokens per counted token from
three readings taken here: the server's tokenizer at first contact (where it has one), each
answer's `usage.prompt_tokens` against memgate's count of that prompt, and a context-length
refusal, after which the request is fitted again to the smaller budget and sent once more. A chat
is never stuck on its own history: the refusal itself makes every later prompt smaller.

Readings are taken only for requests whose byte bound could reach the limit at the highest ratio:
a turn far within it is decided by bytes, as before, and never builds the tokenizer's vocabulary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.config.models import LLMConfig
from gateway.errors import LLMStatusError
from gateway.llm.gate import EndpointGate, Priority
from gateway.llm.server_tokens import ContextOverflow, context_overflow, count_on_server
from gateway.llm.types import ChatResponse
from memory.budget import PromptBudget
from memory.calibration import MAX_RATIO, MIN_SAMPLE
from memory.tokens import MESSAGE_OVERHEAD, message_text

log = logging.getLogger(__name__)

Message = dict[str, Any]
Answer = ChatResponse | str  # a response, or the text a /stop kept of a streamed one


class ContextFitter:
    """Sends a turn's requests through `call`, learning the server's token ratio as it goes."""

    def __init__(
        self, budget: PromptBudget, llm: LLMConfig, gate: EndpointGate | None = None
    ) -> None:
        self.budget = budget
        self.calibration = budget.calibration
        self._llm = llm
        # The endpoint's gate: the tokenizer call waits its turn like a reply, for a one-slot
        # llama-cpp-python server cuts a running stream when another request arrives.
        self._gate = gate
        self._probed = False  # the tokenizer endpoint is asked once a process, at most
        # What the server's usage teaches is learnt beside the reply, not before it: the exact
        # count it needs may build the tokenizer's vocabulary (a third of a second, once).
        self._learning: set[asyncio.Task[None]] = set()

    async def call(
        self,
        request: list[Message],
        tools: list[dict[str, Any]],
        send: Callable[[list[Message]], Awaitable[Answer]],
        refit: Callable[[], list[Message]],
    ) -> Answer:
        """`send(request)`; after a context-length refusal, the calibration learns from it and
        `send(refit())` is tried once (`refit` runs in a worker thread, under the new limit; its
        BudgetError passes up). Usage of the answer is learnt from."""
        watched = self._watched(request, tools)
        if watched and not self._probed and not self.calibration.learnt:
            self._probed = True
            if await self._probe(request, tools):
                request = await asyncio.to_thread(refit)  # chosen before the ratio was known
        try:
            answer = await send(request)
        except LLMStatusError as exc:
            overflow = context_overflow(exc.status, str(exc))
            if overflow is None:
                raise
            await self._refused(request, tools, overflow)
            request = await asyncio.to_thread(refit)
            log.info("context refusal, asking again limit=%d", self.budget.limit)
            try:
                answer = await send(request)
            except LLMStatusError as again:
                overflow = context_overflow(again.status, str(again))
                if overflow is not None:  # the next message starts smaller still
                    await self._refused(request, tools, overflow)
                raise
            watched = True
        if watched and isinstance(answer, ChatResponse) and answer.prompt_tokens:
            learning = asyncio.create_task(self._observe(request, tools, answer.prompt_tokens))
            self._learning.add(learning)
            learning.add_done_callback(self._learning.discard)
        return answer

    async def settle(self) -> None:
        """Wait until what the answers so far taught is learnt (and kept in the state folder);
        answers that come meanwhile are not waited for, so a busy server cannot starve a caller."""
        if self._learning:
            await asyncio.gather(*list(self._learning))

    def _watched(self, request: list[Message], tools: list[dict[str, Any]]) -> bool:
        """Whether the request could be over the server's context at the highest ratio."""
        return self.budget.at_most(request, tools) * MAX_RATIO >= self.budget.base_limit

    async def _observe(
        self, request: list[Message], tools: list[dict[str, Any]], reported: int
    ) -> None:
        try:
            counted = await asyncio.to_thread(self.budget.size, request, tools)
            if self.calibration.observe(counted, reported):
                await asyncio.to_thread(self.calibration.save)
        except Exception as exc:  # a full disk: the ratio is learnt again from the next answers
            log.warning("token calibration not kept error=%s", exc)
            log.debug("token calibration failed", exc_info=True)

    async def _refused(
        self, request: list[Message], tools: list[dict[str, Any]], overflow: ContextOverflow
    ) -> None:
        counted = await asyncio.to_thread(self.budget.size, request, tools)
        self.calibration.refused(counted, overflow.prompt_tokens, overflow.room)
        await asyncio.to_thread(self.calibration.save)

    async def _probe(self, request: list[Message], tools: list[dict[str, Any]]) -> bool:
        """The server's tokenizer on this request's text, against memgate's count of it; True
        when the calibration learnt from it."""
        texts = [message_text(m) for m in request]
        text = "\n".join(t for t in texts if t)
        llm = self._llm
        turn = self._gate.slot(Priority.REPLY) if self._gate else contextlib.nullcontext()
        async with turn:
            reported = await count_on_server(
                llm.base_url, llm.api_key, llm.model, text, within=llm.timeout
            )
        if reported is None:
            return False
        counted = await asyncio.to_thread(self.budget.counter.count, text)
        if counted < MIN_SAMPLE:
            return False
        # Each message's framing is the chat template's, on both sides: the same allowance.
        framing = MESSAGE_OVERHEAD * len(request)
        if self.calibration.observe(counted + framing, reported + framing, "tokenize"):
            await asyncio.to_thread(self.calibration.save)
        return True
