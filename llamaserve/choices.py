"""Running the n choices of one request on an engine, with engine errors mapped to API errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from llamacore.completion import CompletionLogprobs
from llamacore.sampling import SamplingParams
from llamaserve.engine import AdapterKey, Engine, EngineClosedError, QueueFullError
from llamaserve.errors import APIError
from llamaserve.generation import Finish, Piece, generate
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


async def run_choices(engine: Engine, choices: list[Choice], *, max_tokens: int | None, adapters: AdapterKey,
                      stops: list[str], n_logprobs: int | None, ignore_eos: bool, metrics: Metrics,
                      model_name: str) -> AsyncIterator[tuple[Choice, Piece | Finish]]:
    """Every Piece/Finish of every choice as produced (choices decode together in the engine)."""
    for c in choices:
        c.sampling.validate()
    gens = [generate(engine, c.tokens, c.sampling, max_tokens=max_tokens, adapters=adapters, stops=stops,
                     n_logprobs=n_logprobs, ignore_eos=ignore_eos, metrics=metrics, model_name=model_name)
            for c in choices]
    try:
        async for i, item in merge(gens):
            if isinstance(item, Finish):
                choices[i].finish = item
            else:
                choices[i].record(item)
            yield choices[i], item
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
