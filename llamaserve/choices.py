"""Running the n choices of one request on an engine, with engine errors mapped to API errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from typing import Union, cast

from llamacore.events import Finished, Progress, Text, TextEvent
from llamacore.prefix import AdapterKey
from llamacore.responses import ChoiceOutput
from llamacore.sampling import SamplingParams
from llamaserve.aio import merge
from llamaserve.engines import AnyEngine
from llamaserve.errors import APIError, api_error_for
from llamaserve.generation import Generation, Timings, generate
from llamaserve.metrics import Metrics

ChoiceEvent = Union[Text, Finished, Progress]


@dataclass(kw_only=True)
class Choice(ChoiceOutput):
    """One requested output: its prompt and sampling, and (as a ChoiceOutput) what it produced."""

    tokens: list[int]
    sampling: SamplingParams
    timings: Timings | None = None      # set once submitted


def cached_tokens(choices: list[Choice], n: int = 1) -> int:
    """Prompt tokens the KV cache already held, counting each prompt once (its first of `n` choices)."""
    return sum(c.timings.n_cached for c in choices[::n] if c.timings is not None)


def run_choices(engine: AnyEngine, choices: list[Choice], stack: AsyncExitStack, *, max_tokens: int | None,
                adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
                metrics: Metrics, model_name: str) -> AsyncIterator[tuple[Choice, TextEvent]]:
    """Every Text/Finished event of every choice as produced (choices decode together in the engine).

    Sampling parameters are checked and the choices submitted now (APIError 400/503), before a
    streamed response has started. Closing ``stack`` cancels whatever is still running: a client that
    leaves before the response body starts never runs the iterator's own cleanup.
    """
    gens = _submit(engine, choices, stack, max_tokens=max_tokens, adapters=adapters, stops=stops,
                   n_logprobs=n_logprobs, ignore_eos=ignore_eos, metrics=metrics, model_name=model_name,
                   progress=False)
    return cast(AsyncIterator[tuple[Choice, TextEvent]], _run(gens, choices))


def run_choices_reporting(engine: AnyEngine, choices: list[Choice], stack: AsyncExitStack, *,
                          max_tokens: int | None, adapters: AdapterKey, stops: list[str], n_logprobs: int | None,
                          ignore_eos: bool, metrics: Metrics, model_name: str,
                          progress: bool) -> AsyncIterator[tuple[Choice, ChoiceEvent]]:
    """As run_choices; with `progress`, a Progress event when a prompt starts and after each of its
    decoded batches (llama-server's return_progress)."""
    gens = _submit(engine, choices, stack, max_tokens=max_tokens, adapters=adapters, stops=stops,
                   n_logprobs=n_logprobs, ignore_eos=ignore_eos, metrics=metrics, model_name=model_name,
                   progress=progress)
    return _run(gens, choices)


def _submit(engine: AnyEngine, choices: list[Choice], stack: AsyncExitStack, *, max_tokens: int | None,
            adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
            metrics: Metrics, model_name: str, progress: bool) -> list[Generation]:
    """Submit the choices (they decode together in the engine); their events are recorded in each
    Choice as `_run` yields them. Sampling parameters are checked and the choices
    submitted now (APIError 400/503), before a streamed response has started. Closing ``stack``
    cancels whatever is still running: a client that leaves before the response body starts never
    runs the iterator's own cleanup.
    """
    if len(choices) > engine.capacity:     # a 503 would invite retries that can never succeed
        raise APIError(400, f"{len(choices)} completions (prompts x n) exceed what this model can run or "
                            f"queue at once ({engine.capacity})", param="n")
    n_vocab = engine.model.n_vocab
    for c in choices:
        try:
            c.sampling.validate()
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
        bad = [t for t in c.sampling.logit_bias if not 0 <= t < n_vocab]
        if bad:
            raise APIError(400, f"logit_bias: token id {bad[0]} is outside the vocabulary (0..{n_vocab - 1})",
                           param="logit_bias")
    gens: list[Generation] = []
    stack.callback(_cancel, gens)       # also covers a queue overflow part-way through the choices
    with _as_api_errors():              # submitted now: a full queue is a 503 before any streamed response
        for c in choices:
            gens.append(generate(engine, c.tokens, c.sampling, max_tokens=max_tokens, adapters=adapters,
                                 stops=stops, n_logprobs=n_logprobs, ignore_eos=ignore_eos, metrics=metrics,
                                 model_name=model_name, progress=progress))
            c.timings = gens[-1].timings
    return gens


def _cancel(gens: list[Generation]) -> None:
    for gen in gens:
        gen.cancel()


@contextmanager
def _as_api_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        raise api_error_for(exc) from None


async def _run(gens: list[Generation], choices: list[Choice]) -> AsyncIterator[tuple[Choice, ChoiceEvent]]:
    with _as_api_errors():
        async for i, event in merge(gens):
            if not isinstance(event, Progress):
                choices[i].add(event)
            yield choices[i], event
