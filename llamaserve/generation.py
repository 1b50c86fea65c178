"""Bridge between an HTTP handler (asyncio) and an Engine (worker thread) for one generation.

The engine emits token ids; this side turns them into text with the same TextStream as the
library (whole UTF-8 characters only, stop strings never leak), and cancels the engine's
sequence as soon as a stop string matches or the client goes away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from llamacore.completion import TokenLogprob
from llamacore.sampling import SamplingParams
from llamacore.text_stream import TextStream
from llamaserve.engine import AdapterKey, Engine, GenRequest
from llamaserve.metrics import Metrics


@dataclass
class Piece:
    """Newly releasable text, with the log-probability entry of the token that produced it."""

    text: str
    logprob: TokenLogprob | None = None


@dataclass
class Finish:
    reason: str                 # "stop" | "length"
    completion_tokens: int


async def generate(engine: Engine, tokens: list[int], sampling: SamplingParams, *, max_tokens: int,
                   adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
                   metrics: Metrics, model_name: str) -> AsyncIterator[Piece | Finish]:
    """Yield Piece objects as text becomes safe to send, then one Finish."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any, Any]] = asyncio.Queue()

    def emit(kind: str, value: Any, extra: Any) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (kind, value, extra))

    room = engine.n_ctx - len(tokens)
    limit = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
    req = GenRequest(tokens, sampling, limit, adapters, emit, n_logprobs=n_logprobs, ignore_eos=ignore_eos)
    engine.submit(req)
    stream = TextStream(stops)
    started, first, count, finished = time.monotonic(), None, 0, False
    try:
        while True:
            kind, value, extra = await events.get()
            if kind == "token":
                count += 1
                if first is None:
                    first = time.monotonic()
                    metrics.ttft.labels(model_name).observe(first - started)
                text = stream.push(engine.model.token_to_piece(value))
                if text or extra is not None:
                    yield Piece(text, extra)
                if stream.stopped:
                    req.cancel()
                    finished = True
                    yield Finish("stop", count)
                    return
            elif kind == "end":
                tail = stream.finish()
                if tail:
                    yield Piece(tail)
                finished = True
                yield Finish("stop" if value == "stop" else "length", count)
                return
            else:
                raise value
    finally:
        req.cancel()                 # no-op when finished; frees the sequence when the client left
        if not finished:
            metrics.cancelled.inc()
        metrics.prompt_tokens.labels(model_name).inc(len(tokens))
        metrics.completion_tokens.labels(model_name).inc(count)
        if first is not None and count > 1:
            metrics.tokens_per_second.labels(model_name).observe((count - 1) / max(time.monotonic() - first, 1e-6))
