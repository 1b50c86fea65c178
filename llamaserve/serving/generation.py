"""Bridge between an HTTP handler (asyncio) and an Engine (worker thread) for one generation.

The engine emits token ids; this side turns them into text with the same TextStream as the
library (whole UTF-8 characters only, stop strings never leak), and cancels the engine's
sequence as soon as a stop string matches or the client goes away.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from llamacore.generation.events import (
    EngineEvent,
    Failed,
    Finished,
    FinishReason,
    Progress,
    Started,
    Text,
    TextEvent,
    Token,
)
from llamacore.generation.kv_reuse import AdapterKey
from llamacore.generation.sampling import SamplingParams
from llamacore.generation.text_stream import TextStream
from llamacore.vision.prompt import images_of
from llamaserve.engine.client import EngineClient
from llamaserve.engine.request import GenRequest
from llamaserve.runtime.metrics import Metrics
from llamaserve.serving.mailbox import Mailbox


def generate(engine: EngineClient, tokens: list[int], sampling: SamplingParams, *, max_tokens: int | None,
             adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
             metrics: Metrics, model_name: str, progress: bool = False,
             preserved: frozenset[int] = frozenset()) -> Generation:
    """Submit the request to the engine now, and return its Text events as text becomes safe to send, then one Finished.

    Submitting before the first iteration lets a full queue (QueueFullError) or a bad request
    (ValueError) fail before a streamed response has sent its 200 headers. Iterate the result, or
    cancel() it if it will never be iterated: a started iteration frees the sequence when it ends.
    A generation that fails raises its error from the iteration.
    """
    mailbox = Mailbox.of(asyncio.get_running_loop())
    events: asyncio.Queue[EngineEvent] = asyncio.Queue()

    loop_thread = threading.get_ident()

    def emit(event: EngineEvent) -> None:
        if threading.get_ident() == loop_thread:    # a worker process's frame, read on the loop
            events.put_nowait(event)
        else:                                       # an engine thread
            mailbox.post(events, event)

    room = engine.n_ctx_seq - len(tokens)
    limit = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
    req = GenRequest(tokens, sampling, limit, adapters, emit, n_logprobs=n_logprobs, ignore_eos=ignore_eos,
                     progress=progress, images=images_of(tokens))
    timings = Timings(time.monotonic(), n_prompt=len(tokens))
    engine.submit(req)
    return Generation(req, _texts(engine, req, events, timings, stops, metrics, model_name, preserved), timings)


@dataclass
class Timings:
    """When a generation's phases happened (time.monotonic) and how many tokens each had: llama.cpp's
    `timings` and the cached tokens of OpenAI's usage come from here."""

    submitted: float
    n_prompt: int
    started: float | None = None        # took a sequence (the prompt's decoding began)
    first_token: float | None = None
    ended: float | None = None
    n_cached: int = 0                   # prompt tokens already in the KV cache
    n_generated: int = 0

    def progress(self, event: Progress) -> dict[str, Any]:
        """llama-server's prompt_progress for a Progress event, and its timings so far."""
        start = self.started if self.started is not None else self.submitted
        ms = max(event.at - start, 0.0) * 1e3 if event.at else 0.0
        prompt_n = max(event.n_processed - self.n_cached, 0)
        return {"prompt_progress": {"total": self.n_prompt, "cache": self.n_cached, "processed": event.n_processed,
                                    "time_ms": ms},
                "timings": self._timings(prompt_n, ms, 0, 0.0)}

    def llama_cpp(self) -> dict[str, float]:
        """llama-server's `timings` object; the generation rate leaves out the first token, which costs
        no decode step of its own (it comes from the prompt's last batch)."""
        start = self.started if self.started is not None else self.submitted
        first = self.first_token if self.first_token is not None else (self.ended or start)
        prompt_n = self.n_prompt - self.n_cached
        prompt_ms = max(first - start, 0.0) * 1e3
        predicted_ms = max((self.ended or time.monotonic()) - first, 0.0) * 1e3 if self.first_token else 0.0
        return self._timings(prompt_n, prompt_ms, self.n_generated, predicted_ms)

    def _timings(self, prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float) -> dict[str, float]:
        steps = max(predicted_n - 1, 0)
        return {"cache_n": self.n_cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
                "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
                "predicted_n": predicted_n, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_ms / steps if steps and predicted_ms > 0 else 0.0,
                "predicted_per_second": 1e3 * steps / predicted_ms if steps and predicted_ms > 0 else 0.0}


class Generation:
    """A submitted generation: an async iterator of its Text events and Finished, and its timings."""

    def __init__(self, req: GenRequest, events: AsyncGenerator[TextEvent | Progress, None], timings: Timings) -> None:
        self.req, self.events, self.timings = req, events, timings

    def __aiter__(self) -> AsyncIterator[TextEvent | Progress]:
        return self.events

    async def aclose(self) -> None:
        await self.events.aclose()

    def cancel(self) -> None:
        self.req.cancel()


async def _texts(engine: EngineClient, req: GenRequest, events: asyncio.Queue[EngineEvent], timings: Timings,
                 stops: list[str], metrics: Metrics, model_name: str,
                 preserved: frozenset[int]) -> AsyncGenerator[TextEvent | Progress, None]:
    stream = TextStream(stops)
    first, count, finished = None, 0, False
    try:
        while True:
            event = await events.get()
            if isinstance(event, Progress):
                yield event
            elif isinstance(event, Started):
                # the engine's clock: a worker process is admitted and samples in one step, whose events
                # arrive here together (time.monotonic is one clock for every process of the machine)
                timings.started, timings.n_cached = event.at or time.monotonic(), event.n_cached
            elif isinstance(event, Token):
                count += 1
                timings.n_generated = count
                if first is None:
                    first = timings.first_token = time.monotonic()
                    metrics.ttft.labels(model_name).observe(first - timings.submitted)
                text = stream.push(engine.model.token_to_piece(event.id, event.id in preserved))
                if text or event.logprob is not None:
                    yield Text(text, event.logprob)
                if stream.stopped:
                    req.cancel()             # the engine reports "cancelled" to nobody: this side has its answer
                    finished, timings.ended = True, time.monotonic()
                    yield Finished(FinishReason.STOP, count, stream.matched)
                    return
            elif isinstance(event, Finished):
                tail = stream.finish()
                if tail:
                    yield Text(tail)
                finished, timings.ended = True, time.monotonic()
                yield event
                return
            else:
                assert isinstance(event, Failed)
                raise event.error
    finally:
        timings.ended = timings.ended or time.monotonic()
        req.cancel()                 # no-op when finished; frees the sequence when the client left
        if not finished:
            metrics.cancelled.inc()
        metrics.prompt_tokens.labels(model_name).inc(timings.n_prompt)
        metrics.completion_tokens.labels(model_name).inc(count)
        metrics.llamacpp.observe_generation(timings)
        if first is not None and count > 1:
            metrics.tokens_per_second.labels(model_name).observe((count - 1) / max(time.monotonic() - first, 1e-6))
