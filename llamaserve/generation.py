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


def generate(engine: Engine, tokens: list[int], sampling: SamplingParams, *, max_tokens: int,
             adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
             metrics: Metrics, model_name: str) -> Generation:
    """Submit the request to the engine now, and return the Pieces as text becomes safe to send, then one Finish.

    Submitting before the first iteration lets a full queue (QueueFullError) or a bad request
    (ValueError) fail before a streamed response has sent its 200 headers. Iterate the result, or
    cancel() it if it will never be iterated: a started iteration frees the sequence when it ends.
    """
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any, Any]] = asyncio.Queue()

    def emit(kind: str, value: Any, extra: Any) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (kind, value, extra))

    room = engine.n_ctx - len(tokens)
    limit = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
    req = GenRequest(tokens, sampling, limit, adapters, emit, n_logprobs=n_logprobs, ignore_eos=ignore_eos)
    submitted = time.monotonic()
    engine.submit(req)
    return Generation(req, _pieces(engine, req, events, submitted, len(tokens), stops, metrics, model_name))


class Generation:
    """A submitted generation: an async iterator of its Pieces and Finish."""

    def __init__(self, req: GenRequest, pieces: AsyncIterator[Piece | Finish]) -> None:
        self.req, self.pieces = req, pieces

    def __aiter__(self) -> AsyncIterator[Piece | Finish]:
        return self.pieces

    async def aclose(self) -> None:
        await self.pieces.aclose()

    def cancel(self) -> None:
        self.req.cancel()


async def _pieces(engine: Engine, req: GenRequest, events: asyncio.Queue, started: float, n_prompt: int,
                  stops: list[str], metrics: Metrics, model_name: str) -> AsyncIterator[Piece | Finish]:
    stream = TextStream(stops)
    first, count, finished = None, 0, False
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
        metrics.prompt_tokens.labels(model_name).inc(n_prompt)
        metrics.completion_tokens.labels(model_name).inc(count)
        if first is not None and count > 1:
            metrics.tokens_per_second.labels(model_name).observe((count - 1) / max(time.monotonic() - first, 1e-6))
