"""llama-server's `llamacpp:*` Prometheus families, so dashboards built for llama-server read llamaserve.

The values are this server's, summed over its models: prompt tokens decoded and reused from the
cache, tokens generated and the time both took (from each generation's Timings), llama_decode calls
and the sequences they carried (from the engines, kept across unloads), speculative drafts, and the
requests running and waiting now. The two throughput gauges average over the window since the last
scrape, as llama-server's do.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol


class _Counted(Protocol):
    def decode_counts(self) -> tuple[int, int, int]: ...
    def speculative_counts(self) -> tuple[int, int] | None: ...


@dataclass
class _Window:
    tokens: int = 0
    seconds: float = 0.0

    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class LlamaCppMetrics:
    prompt_tokens: int = 0
    prompt_cached: int = 0
    prompt_seconds: float = 0.0
    predicted: int = 0
    predicted_seconds: float = 0.0
    n_tokens_max: int = 0
    embed_decodes: int = 0
    started: int = field(default_factory=lambda: int(time.time()))     # unix time the server started
    # (decodes, sequences over them, verification steps, draft tokens, drafts accepted) of unloaded engines
    retired: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])
    prompt_window: _Window = field(default_factory=_Window)
    predicted_window: _Window = field(default_factory=_Window)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def observe_generation(self, timings: Any) -> None:
        """A generation ended (llamaserve.serving.generation.Timings); one never started decoded nothing."""
        if timings.started is None:
            return
        t = timings.llama_cpp()
        with self.lock:
            self.prompt_tokens += t["prompt_n"]
            self.prompt_cached += t["cache_n"]
            self.prompt_seconds += t["prompt_ms"] / 1e3
            self.predicted += t["predicted_n"]
            self.predicted_seconds += t["predicted_ms"] / 1e3
            self.n_tokens_max = max(self.n_tokens_max, timings.n_prompt + timings.n_generated)
            self.prompt_window.tokens += t["prompt_n"]
            self.prompt_window.seconds += t["prompt_ms"] / 1e3
            self.predicted_window.tokens += max(t["predicted_n"] - 1, 0)    # the first token costs no step
            self.predicted_window.seconds += t["predicted_ms"] / 1e3

    def observe_embedding(self, n_tokens: int, seconds: float, decodes: int) -> None:
        with self.lock:
            self.prompt_tokens += n_tokens
            self.prompt_seconds += seconds
            self.embed_decodes += decodes
            self.prompt_window.tokens += n_tokens
            self.prompt_window.seconds += seconds

    def retire(self, engine: _Counted | None) -> None:
        """An engine is unloading: keep its counts (the totals must not go down)."""
        if engine is not None:
            with self.lock:
                self.retired = [a + b for a, b in zip(self.retired, _engine_counts(engine))]

    def render(self, engines: list[Any], processing: int, deferred: int) -> str:
        """The text exposition; resets the throughput windows."""
        live = [_engine_counts(e) for e in engines]
        with self.lock:
            decodes, busy, steps, drafted, accepted = (self.retired[i] + sum(c[i] for c in live) for i in range(5))
            decodes_all = decodes + self.embed_decodes
            counters = [
                ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
                 self.prompt_tokens),
                ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", self.prompt_cached),
                ("prompt_seconds_total", "Total time spent processing prompts", self.prompt_seconds),
                ("tokens_predicted_total", "Number of generation tokens processed", self.predicted),
                ("tokens_predicted_seconds_total", "Total time spent generating tokens", self.predicted_seconds),
                ("n_decode_total", "Total number of llama_decode() calls", decodes_all),
                ("n_tokens_max", "Largest observed sequence length (prompt + generation)", self.n_tokens_max),
                ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", drafted),
                ("spec_decode_num_accepted_tokens_total",
                 "Speculative: Total draft tokens accepted by the target model", accepted),
                ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps", steps),
            ]
            gauges = [
                ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", self.prompt_window.rate()),
                ("predicted_tokens_seconds", "Average generation throughput in tokens/s",
                 self.predicted_window.rate()),
                ("requests_processing", "Number of requests processing", processing),
                ("requests_deferred", "Number of requests deferred", deferred),
                ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
                 busy / max(decodes, 1)),
            ]
            self.prompt_window, self.predicted_window = _Window(), _Window()
        lines = []
        for kind, items in (("counter", counters), ("gauge", gauges)):
            for name, help_text, value in items:
                lines += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                          f"llamacpp:{name} {value}"]
        return "\n".join(lines) + "\n"


def _engine_counts(engine: _Counted) -> tuple[int, int, int, int, int]:
    decodes, busy, steps = engine.decode_counts()
    drafted, accepted = engine.speculative_counts() or (0, 0)
    return decodes, busy, steps, drafted, accepted
