"""Running the n choices of one request on an engine, with engine errors mapped to API errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field

from llamacore.completion import CompletionLogprobs
from llamacore.sampling import SamplingParams
from llamaserve.engine import AdapterKey, Engine, EngineClosedError, QueueFullError
from llamaserve.errors import APIError
from llamaserve.generation import Finish, Generation, Piece, generate
from llamaserve.metrics import Metrics
from llamaserve.sse import merge


@dataclass
class Choice:
    """One requested output and, as it runs, what it produced."""

    index: int
    tokens: list[int]
    sampling: SamplingParams
    text: list[str] = field(default_factory=list)
    logprobs: CompletionLogprobs | None = None
    finish: Finish | None = None
    offset: int = 0

    def record(self, piece: Piece) -> None:
        if piece.logprob is not None:
            self.logprobs = self.logprobs or CompletionLogprobs()
            self.logprobs.add(piece.logprob, self.offset)
        self.text.append(piece.text)
        self.offset += len(piece.text)


def run_choices(engine: Engine, choices: list[Choice], stack: AsyncExitStack, *, max_tokens: int | None,
                adapters: AdapterKey, stops: list[str], n_logprobs: int | None, ignore_eos: bool,
                metrics: Metrics, model_name: str) -> AsyncIterator[tuple[Choice, Piece | Finish]]:
    """Every Piece/Finish of every choice as produced (choices decode together in the engine).

    Sampling parameters are checked and the choices submitted now (APIError 400/503), before a
    streamed response has started. Closing ``stack`` cancels whatever is still running: a client
    that leaves before the response body starts never runs the iterator's own cleanup.
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
                                 model_name=model_name))
    return _run(gens, choices)


def _cancel(gens: list[Generation]) -> None:
    for gen in gens:
        gen.cancel()


@contextmanager
def _as_api_errors() -> Iterator[None]:
    try:
        yield
    except QueueFullError as exc:
        raise APIError(503, f"{exc}; retry later", headers={"Retry-After": "1"}) from None
    except EngineClosedError as exc:
        raise APIError(503, str(exc), headers={"Retry-After": "1"}) from None
    except ValueError as exc:
        raise APIError(400, str(exc)) from None
    except APIError:
        raise
    except Exception as exc:
        raise APIError(500, f"generation failed: {type(exc).__name__}: {exc}") from None


async def _run(gens: list[Generation], choices: list[Choice]) -> AsyncIterator[tuple[Choice, Piece | Finish]]:
    with _as_api_errors():
        async for i, item in merge(gens):
            if isinstance(item, Finish):
                choices[i].finish = item
            else:
                choices[i].record(item)
            yield choices[i], item
