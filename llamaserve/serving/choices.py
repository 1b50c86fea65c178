"""Running the n choices of one request on an engine, and their events as they come."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from llamacore.chat.openai import ChoiceOutput
from llamacore.generation.events import Finished, Progress, Text, TextEvent
from llamacore.generation.kv_reuse import AdapterKey
from llamacore.generation.sampling import SamplingParams
from llamaserve.engine.client import EngineClient
from llamaserve.errors import RequestError
from llamaserve.runtime.metrics import Metrics
from llamaserve.serving.aio import merge
from llamaserve.serving.generation import Generation, Timings, generate

ChoiceEvent = Text | Finished | Progress
E = TypeVar("E", TextEvent, ChoiceEvent)


@dataclass(kw_only=True)
class Choice(ChoiceOutput):
    """One requested output: its prompt and sampling, and (as a ChoiceOutput) what it produced."""

    tokens: list[int]
    sampling: SamplingParams
    timings: Timings | None = None      # set once submitted


def cached_tokens(choices: list[Choice], n: int = 1) -> int:
    """Prompt tokens the KV cache already held, counting each prompt once (its first of `n` choices)."""
    return sum(c.timings.n_cached for c in choices[::n] if c.timings is not None)


def run_choices(engine: EngineClient, choices: list[Choice], stack: AsyncExitStack, *, max_tokens: int | None,
                adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
                metrics: Metrics, model_name: str, preserved: frozenset[int] = frozenset()) -> ChoiceEvents[TextEvent]:
    """Every Text/Finished event of every choice as produced (choices decode together in the engine).

    Sampling parameters are checked and the choices submitted now (RequestError, or the engine's
    QueueFullError), before a
    streamed response has started. Closing ``stack`` cancels whatever is still running: a client that
    leaves before the response body starts never runs the iterator's own cleanup.
    """
    gens = _submit(engine, choices, stack, max_tokens=max_tokens, adapters=adapters, stops=stops,
                   n_logprobs=n_logprobs, ignore_eos=ignore_eos, metrics=metrics, model_name=model_name,
                   progress=False, preserved=preserved)
    return ChoiceEvents(cast(AsyncIterator[tuple[Choice, TextEvent]], _run(gens, choices)))


def run_choices_reporting(engine: EngineClient, choices: list[Choice], stack: AsyncExitStack, *,
                          max_tokens: int | None, adapters: AdapterKey, stops: list[str], n_logprobs: int | None,
                          ignore_eos: bool, metrics: Metrics, model_name: str,
                          progress: bool, preserved: frozenset[int] = frozenset()) -> ChoiceEvents[ChoiceEvent]:
    """As run_choices; with `progress`, a Progress event when a prompt starts and after each of its
    decoded batches (llama-server's return_progress)."""
    gens = _submit(engine, choices, stack, max_tokens=max_tokens, adapters=adapters, stops=stops,
                   n_logprobs=n_logprobs, ignore_eos=ignore_eos, metrics=metrics, model_name=model_name,
                   progress=progress, preserved=preserved)
    return ChoiceEvents(_run(gens, choices))


def _submit(engine: EngineClient, choices: list[Choice], stack: AsyncExitStack, *, max_tokens: int | None,
            adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
            metrics: Metrics, model_name: str, progress: bool, preserved: frozenset[int]) -> list[Generation]:
    """Submit the choices (they decode together in the engine); their events are recorded in each
    Choice as `_run` yields them. Sampling parameters are checked and the choices submitted now
    (RequestError, or the engine's QueueFullError), before a streamed response has started. Closing ``stack``
    cancels whatever is still running: a client that leaves before the response body starts never
    runs the iterator's own cleanup. `preserved`: special tokens whose text the answer keeps (a chat
    template's tool-call and thinking markers); other special tokens are no text.
    """
    if len(choices) > engine.capacity:     # a 503 would invite retries that can never succeed
        raise RequestError(f"{len(choices)} completions (prompts x n) exceed what this model can run or "
                            f"queue at once ({engine.capacity})", param="n")
    n_vocab = engine.model.n_vocab
    for c in choices:
        try:
            c.sampling.validate()
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        bad = [t for t in c.sampling.logit_bias if not 0 <= t < n_vocab]
        if bad:
            raise RequestError(f"logit_bias: token id {bad[0]} is outside the vocabulary (0..{n_vocab - 1})",
                           param="logit_bias")
    gens: list[Generation] = []
    stack.callback(_cancel, gens)       # also covers a queue overflow part-way through the choices
    for c in choices:                   # submitted now: a full queue is refused before any streamed response
        gens.append(generate(engine, c.tokens, c.sampling, max_tokens=max_tokens, adapters=adapters,
                             stops=stops, n_logprobs=n_logprobs, ignore_eos=ignore_eos, metrics=metrics,
                             model_name=model_name, progress=progress, preserved=preserved))
        c.timings = gens[-1].timings
    return gens


def _cancel(gens: list[Generation]) -> None:
    for gen in gens:
        gen.cancel()


class ChoiceEvents(Generic[E]):
    """The events of a request's choices as they are produced; `ready()` waits for the first one
    without taking it, so that a streamed response can start only once there is something to send."""

    def __init__(self, events: AsyncIterator[tuple[Choice, E]]) -> None:
        self._events: AsyncIterator[tuple[Choice, E]] = events
        self._first: tuple[Choice, E] | None = None
        self._ended = False

    async def ready(self) -> None:
        """Wait for the first event (or the end); an engine failure before it raises here."""
        if self._first is None and not self._ended:
            try:
                self._first = await anext(self._events)
            except StopAsyncIteration:
                self._ended = True

    def __aiter__(self) -> ChoiceEvents[E]:
        return self

    async def __anext__(self) -> tuple[Choice, E]:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self._ended:
            raise StopAsyncIteration
        return await anext(self._events)


async def _run(gens: list[Generation], choices: list[Choice]) -> AsyncIterator[tuple[Choice, ChoiceEvent]]:
    async for i, event in merge(gens):
        if not isinstance(event, Progress):
            choices[i].add(event)
        yield choices[i], event
