"""Log-probabilities of sampled tokens, computed from a row of logits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


@dataclass(frozen=True)
class TokenLogprob:
    """Log-probability of one chosen token and of the `top` most likely alternatives."""

    token: int
    text: str
    logprob: float | None               # None for the first prompt token of an echo
    top: list[tuple[int, str, float]]   # (token, text, logprob), most likely first

    @classmethod
    def from_logits(cls, logits: np.ndarray, token: int, n_top: int,
                    piece: Callable[[int], str]) -> TokenLogprob:
        lp = log_softmax(logits.astype(np.float32, copy=False))
        top: list[tuple[int, str, float]] = []
        if n_top > 0:
            idx = np.argpartition(-lp, n_top - 1)[:n_top]
            idx = idx[np.argsort(-lp[idx])]
            top = [(int(i), piece(int(i)), float(lp[i])) for i in idx]
        return cls(token, piece(token), float(lp[token]), top)
