"""Metric series go with the runtime alias they are labelled with (hostile clients, finding 8: a
client adding and removing aliases grew /metrics by 32 series each, for ever)."""

from __future__ import annotations

from llamaserve.runtime.metrics import Metrics


def test_a_removed_alias_leaves_no_series():
    metrics = Metrics()
    for alias in ("kept", "gone"):
        metrics.prompt_tokens.labels(alias).inc(3)
        metrics.ttft.labels(alias).observe(0.2)
        metrics.tokens_per_second.labels(alias).observe(40)
        metrics.unloads.labels(alias, "idle").inc()
        metrics.adapter_requests.labels(alias, "lora-a").inc()
    metrics.forget_model("gone")
    text = metrics.render().decode()
    assert 'model="gone"' not in text
    assert text.count('model="kept"') > 10
