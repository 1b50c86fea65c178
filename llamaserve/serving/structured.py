"""A request's grammar: its ``response_format`` converted off the event loop, through the server's
cache, or its own GBNF ``grammar`` (llama.cpp's field), parsed by llama.cpp before it is used.

Conversion is pure Python bounded by the configured grammar limits; in a worker thread it gives
up the GIL every few milliseconds, so other requests keep streaming tokens meanwhile, and a
repeated schema costs only its hash. The engine thread then just builds llama.cpp's sampler from
the text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llamacore import Model, Sampler
from llamacore.chat.prompt import grammar_for
from llamacore.grammar.cache import GrammarCache
from llamacore.grammar.limits import GrammarLimits, check_gbnf
from llamaserve.config.settings import ModelEntry, ServerConfig
from llamaserve.errors import RequestError
from llamaserve.models.registry import Registry
from llamaserve.runtime.metrics import Metrics


class GrammarRequest(Protocol):
    """What a request says of its output's form (the API schemas' SamplingFields)."""

    @property
    def model(self) -> str | None: ...

    @property
    def grammar(self) -> str | None: ...

    @property
    def response_format(self) -> dict[str, Any] | None: ...

    @property
    def json_whitespace(self) -> str | None: ...

    def stop_list(self) -> list[str]: ...


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


async def check_grammar(model: Model, grammar: str, limits: GrammarLimits | None = None) -> None:
    """Check a client's GBNF grammar before any response has started: its size and rule count against
    `limits`, then llama.cpp's parser and its first stacks, off the event loop and within the grammar
    work limit (an ambiguous grammar is refused here). RequestError with the reason."""
    try:
        check_gbnf(grammar, limits or GrammarLimits())
        await asyncio.to_thread(Sampler().grammar, model, grammar)
    except ValueError as exc:
        raise RequestError(f"grammar: {exc}", param="grammar") from None


def grammar_cache(config: ServerConfig, metrics: Metrics) -> GrammarCache:
    """The server's grammar cache, under the configured limits, reported on /metrics."""
    limits = GrammarLimits(max_size=config.grammar_max_size, max_depth=config.grammar_max_depth,
                           timeout=config.grammar_timeout)
    cache = GrammarCache(config.grammar_cache_size, limits)
    metrics.registry.register(_CacheCollector(cache))
    return cache


async def stops_and_grammar(registry: Registry, grammars: GrammarCache,
                            body: GrammarRequest) -> tuple[list[str], str | None]:
    """A completion request's stop strings and output grammar, checked before its model is pinned (a
    400 costs no load)."""
    try:
        return body.stop_list(), await response_grammar(grammars, body, registry.entry(body.model, fallback=True))
    except ValueError as exc:
        raise RequestError(str(exc)) from None


async def response_grammar(grammars: GrammarCache, body: GrammarRequest, entry: ModelEntry) -> str | None:
    """GBNF for the request's `grammar` or response_format (None for text); ValueError (a 400) if
    refused. A `grammar` is checked against llama.cpp's parser by `check_grammar`, once the model is there."""
    if body.grammar is not None:
        if body.response_format and body.response_format.get("type") != "text":
            raise ValueError("give either grammar or response_format, not both")
        return body.grammar
    if not body.response_format:
        return None
    return await format_grammar(grammars, body.response_format, body.json_whitespace or entry.json_whitespace)


async def format_grammar(grammars: GrammarCache, response_format: dict[str, Any],
                         whitespace: str | None) -> str | None:
    """GBNF for an OpenAI-shaped response_format (None for text), converted off the event loop through
    the server's grammar cache; ValueError if refused."""
    return await asyncio.to_thread(grammar_for, response_format, whitespace=whitespace or "compact",
                                   cache=grammars)
