"""A request's ``response_format`` grammar: converted off the event loop, through the server's cache.

Conversion is pure Python bounded by the configured grammar limits; in a worker thread it gives
up the GIL every few milliseconds, so other requests keep streaming tokens meanwhile, and a
repeated schema costs only its hash. The engine thread then just builds llama.cpp's sampler from
the text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llamacore.chat import grammar_for
from llamacore.grammar_cache import GrammarCache
from llamacore.grammar_limits import GrammarLimits
from llamaserve.metrics import Metrics
from llamaserve.schemas import SamplingFields
from llamaserve.settings import ModelEntry, ServerConfig


class _CacheCollector(Collector):
    """The cache's counters as Prometheus series, read when /metrics is rendered."""

    def __init__(self, cache: GrammarCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        c = self.cache
        yield CounterMetricFamily("llamaserve_grammar_cache_hits", "Schemas answered from the grammar cache",
                                  value=c.hits)
        yield CounterMetricFamily("llamaserve_grammar_cache_misses", "Schemas converted to a grammar",
                                  value=c.misses)
        yield GaugeMetricFamily("llamaserve_grammar_cache_bytes", "Bytes of grammar text in the cache", value=c.size)


def grammar_cache(config: ServerConfig, metrics: Metrics) -> GrammarCache:
    """The server's grammar cache, under the configured limits, reported on /metrics."""
    limits = GrammarLimits(max_size=config.grammar_max_size, max_depth=config.grammar_max_depth,
                           timeout=config.grammar_timeout)
    cache = GrammarCache(config.grammar_cache_size, limits)
    metrics.registry.register(_CacheCollector(cache))
    return cache


async def response_grammar(state: Any, body: SamplingFields, entry: ModelEntry) -> str | None:
    """GBNF for the request's response_format (None for text); ValueError (a 400) if refused."""
    if not body.response_format:
        return None
    whitespace = body.json_whitespace or entry.json_whitespace or "compact"
    return await asyncio.to_thread(grammar_for, body.response_format, whitespace=whitespace,
                                   cache=state.grammars)
