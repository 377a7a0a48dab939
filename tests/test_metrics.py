"""The operator's figures: what the agent reports after each turn adds up in /metrics' text."""

from __future__ import annotations

from gateway.service.metrics import Metrics


def test_messages_count_by_channel_and_tokens_by_kind() -> None:
    """Each channel keeps its own counts (its error count from 0, not missing), and tokens add up
    as prompt and completion."""
    metrics = Metrics()
    for channel in ("telegram", "telegram", "discord"):
        metrics.message_in(channel)
    metrics.message_out("telegram", error=False)
    metrics.message_out("discord", error=True)
    metrics.llm_call(0.2, prompt_tokens=100, completion_tokens=7)
    metrics.llm_call(0.3, prompt_tokens=50, completion_tokens=3)
    text = metrics.render().decode()
    assert 'memgate_messages_in_total{channel="telegram"} 2.0' in text
    assert 'memgate_messages_in_total{channel="discord"} 1.0' in text
    assert 'memgate_messages_out_total{channel="telegram"} 1.0' in text
    assert 'memgate_turn_errors_total{channel="discord"} 1.0' in text
    assert 'memgate_turn_errors_total{channel="telegram"} 0.0' in text  # a series from the start
    assert 'memgate_tokens_total{kind="prompt"} 150.0' in text
    assert 'memgate_tokens_total{kind="completion"} 10.0' in text
    assert "memgate_llm_latency_seconds_count 2.0" in text
