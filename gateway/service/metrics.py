"""Operator-facing figures: the gateway's Prometheus metrics, rendered for /metrics.

The only module that imports prometheus_client. Each gateway has its own registry, so figures
never leak between runtimes (or tests) in one process. The HTTP endpoints that serve them are
gateway/service/health.py's.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# The media type of `Metrics.render()`'s text, for the endpoint that serves it.
METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """The gateway's counters and histograms; the agent reports into it after every turn."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter(
            "memgate_messages_in", "Messages received, by channel", ["channel"], registry=r
        )
        self.messages_out = Counter(
            "memgate_messages_out", "Replies produced, by channel", ["channel"], registry=r
        )
        self.turn_errors = Counter(
            "memgate_turn_errors", "Turns that ended in an error reply", ["channel"], registry=r
        )
        self.llm_latency = Histogram(
            "memgate_llm_latency_seconds",
            "Latency of chat completion calls",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 80),
            registry=r,
        )
        self.tokens = Counter("memgate_tokens", "Tokens used, by kind", ["kind"], registry=r)
        # Label lookups take a lock and hash the values: done once here, not on every turn.
        self._prompt_tokens = self.tokens.labels("prompt")
        self._completion_tokens = self.tokens.labels("completion")
        self._by_channel: dict[str, tuple[Counter, Counter, Counter]] = {}
        self.turns_resumed = Counter(
            "memgate_turns_resumed",
            "Turns a restart stopped half-way, resumed from their stored tool steps",
            registry=r,
        )
        self.replies_resent = Counter(
            "memgate_replies_resent",
            "Stored answers sent again after a restart because none was marked delivered",
            registry=r,
        )

    def watch_consolidation(
        self,
        runs: Callable[[], float],
        failures: Callable[[], float],
        depth: Callable[[], float],
        backing_off: Callable[[], float] = lambda: 0,
    ) -> None:
        """Expose the consolidator's own counts, read at scrape time."""
        for name, help_text, read in (
            ("memgate_consolidation_runs", "Consolidation runs completed", runs),
            (
                "memgate_consolidation_failures",
                "Failed consolidation attempts (the model call or any write after it)",
                failures,
            ),
            ("memgate_consolidation_queue_depth", "Sessions queued or consolidating", depth),
            (
                "memgate_consolidation_backing_off",
                "Sessions waiting out a backoff after failed consolidations",
                backing_off,
            ),
        ):
            Gauge(name, help_text, registry=self.registry).set_function(read)

    # -- the agent's observer interface ----------------------------------------------------------
    def message_in(self, channel: str) -> None:
        self._channel(channel)[0].inc()

    def message_out(self, channel: str, *, error: bool) -> None:
        _, out, errors = self._channel(channel)
        out.inc()
        if error:
            errors.inc()

    def llm_call(self, seconds: float, prompt_tokens: int, completion_tokens: int) -> None:
        self.llm_latency.observe(seconds)
        self._prompt_tokens.inc(prompt_tokens)
        self._completion_tokens.inc(completion_tokens)

    def _channel(self, channel: str) -> tuple[Counter, Counter, Counter]:
        """The channel's in, out and error counters, made at its first message (so its error
        count shows 0 rather than nothing until the first error); a handful of channels."""
        counters = self._by_channel.get(channel)
        if counters is None:
            counters = (
                self.messages_in.labels(channel),
                self.messages_out.labels(channel),
                self.turn_errors.labels(channel),
            )
            self._by_channel[channel] = counters
        return counters

    def turn_resumed(self) -> None:
        self.turns_resumed.inc()

    def reply_resent(self) -> None:
        self.replies_resent.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
