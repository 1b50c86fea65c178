"""Prometheus metrics, one registry per app so several servers can live in one process (tests).

Per-adapter series are labelled by the base model's alias and the adapter's name; names come
from the config and the admin routes only, and a runtime adapter's series go when it is removed,
so the number of series stays bounded by what is loaded.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from llamaserve.runtime.gc_pauses import GcPauses
from llamaserve.runtime.llama_server_metrics import LlamaCppMetrics


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("llamaserve_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=r)
        self.prompt_tokens = Counter("llamaserve_prompt_tokens", "Prompt tokens processed", ["model"], registry=r)
        self.completion_tokens = Counter("llamaserve_completion_tokens", "Tokens generated", ["model"], registry=r)
        self.ttft = Histogram("llamaserve_time_to_first_token_seconds", "Time to first token", ["model"],
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.tokens_per_second = Histogram("llamaserve_generation_tokens_per_second", "Per-request generation speed",
                                           ["model"], buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000), registry=r)
        self.active_sequences = Gauge("llamaserve_active_sequences", "Sequences being decoded", registry=r)
        self.queue_depth = Gauge("llamaserve_queue_depth", "Requests waiting for a sequence slot", registry=r)
        self.loaded_models = Gauge("llamaserve_loaded_models", "Base models currently loaded", registry=r)
        self.loads = Counter("llamaserve_model_loads", "Model loads", ["model"], registry=r)
        self.load_failures = Counter("llamaserve_model_load_failures", "Failed model loads", ["model"], registry=r)
        self.unloads = Counter("llamaserve_model_unloads", "Model unloads by reason", ["model", "reason"], registry=r)
        self.adapter_requests = Counter("llamaserve_adapter_requests", "Generation requests per LoRA adapter",
                                        ["model", "adapter"], registry=r)
        self.adapter_prompt_tokens = Counter("llamaserve_adapter_prompt_tokens", "Prompt tokens per LoRA adapter",
                                             ["model", "adapter"], registry=r)
        self.adapter_completion_tokens = Counter("llamaserve_adapter_completion_tokens",
                                                 "Tokens generated per LoRA adapter", ["model", "adapter"], registry=r)
        self.adapter_loads = Counter("llamaserve_adapter_loads", "LoRA adapter loads onto a base model",
                                     ["model", "source"], registry=r)
        self.adapter_load_failures = Counter("llamaserve_adapter_load_failures", "Failed LoRA adapter loads",
                                             ["model", "source"], registry=r)
        self.adapter_unloads = Counter("llamaserve_adapter_unloads", "LoRA adapters freed, by reason",
                                       ["model", "reason"], registry=r)
        # totals of the loaded engines (they start at 0 when a model loads again)
        self.draft_tokens = Gauge("llamaserve_speculative_draft_tokens",
                                  "Draft tokens decoded by speculative decoding, per loaded model", ["model"],
                                  registry=r)
        self.draft_accepted = Gauge("llamaserve_speculative_accepted_tokens",
                                    "Draft tokens accepted (acceptance rate = accepted / draft)", ["model"], registry=r)
        self.worker_crashes = Counter("llamaserve_worker_crashes",
                                      "Model worker processes that died, by cause "
                                      "(max_rss, hung, killed, signal, exit)",
                                      ["model", "cause"], registry=r)
        self.worker_restarts = Counter("llamaserve_worker_restarts",
                                       "Model worker processes started again after a crash", ["model"], registry=r)
        self.cancelled = Counter("llamaserve_cancelled_requests", "Generations stopped by client disconnect",
                                 registry=r)
        self.gc = GcPauses(r)
        self.llamacpp = LlamaCppMetrics()      # llama-server's llamacpp:* families, rendered after these

    def forget_adapter(self, model: str, names: set[str]) -> None:
        """Drop the per-adapter series of a removed runtime adapter."""
        for name in names:
            for counter in (self.adapter_requests, self.adapter_prompt_tokens, self.adapter_completion_tokens):
                try:
                    counter.remove(model, name)
                except KeyError:
                    pass

    def forget_model(self, alias: str) -> None:
        """Drop every series labelled with a removed runtime alias (its tokens, timings, loads): series of
        aliases that no longer exist would otherwise stay in every scrape for ever."""
        for metric in (self.prompt_tokens, self.completion_tokens, self.ttft, self.tokens_per_second, self.loads,
                       self.load_failures, self.unloads, self.adapter_requests, self.adapter_prompt_tokens,
                       self.adapter_completion_tokens, self.adapter_loads, self.adapter_load_failures,
                       self.adapter_unloads, self.draft_tokens, self.draft_accepted):
            names = metric._labelnames      # prometheus_client keeps a metric's label names here
            seen = {tuple(s.labels[n] for n in names) for family in metric.collect() for s in family.samples
                    if s.labels.get("model") == alias and all(n in s.labels for n in names)}
            for values in seen:
                with contextlib.suppress(KeyError):
                    metric.remove(*values)

    def render(self) -> bytes:
        return generate_latest(self.registry)
