"""llama-cpp-python's per-token hooks: logits processors and stopping criteria.

Both are called with the tokens in the context so far (prompt and generated, as an `intc` array)
and the logits the next token is sampled from (a `float32` view of llama.cpp's own buffer). A
logits processor returns the logits to sample from (changing them in place works too); a stopping
criterion returns True to end the completion there, with finish_reason "stop". Unused, they cost
nothing: no array is built per token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], npt.NDArray[np.single]]
StoppingCriteria = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], bool]


class LogitsProcessorList(list):
    """Processors applied in order, each to what the one before returned."""

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(list):
    """Stop when any of the criteria says so."""

    def __call__(self, input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return any(criterion(input_ids, logits) for criterion in self)


def apply_processor(processor: Any, input_ids: list[int], scores: npt.NDArray[np.single]) -> None:
    """Run `processor` and leave its result in `scores` (llama.cpp samples from that buffer)."""
    out = processor(np.asarray(input_ids, dtype=np.intc), scores)
    if out is not scores:
        out = np.asarray(out, dtype=np.single)
        if out.shape != scores.shape:
            raise ValueError(f"logits_processor returned shape {out.shape}, expected {scores.shape}")
        scores[:] = out


__all__ = ["LogitsProcessor", "LogitsProcessorList", "StoppingCriteria", "StoppingCriteriaList", "apply_processor"]
