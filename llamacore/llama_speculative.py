"""Draft tokens for `Llama(draft_model=...)`: speculative decoding in the high-level API.

llama-cpp-python's names: `LlamaDraftModel` (a callable from the tokens so far to draft tokens)
and `LlamaPromptLookupDecoding` (drafts by prompt lookup). A `Llama` given as `draft_model` drafts
greedily with that (small) model, in its own context. `Llama` decodes the next token and the
drafts in one batch and keeps the drafts its own sampler picks in turn, so its output is what
plain decoding gives; `Llama.n_drafted` / `n_accepted` count them.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import numpy.typing as npt

from llamacore.generation.lookup import NgramIndex

__all__ = ["LlamaDraftModel", "LlamaPromptLookupDecoding"]


class LlamaDraftModel(abc.ABC):
    """Proposes tokens to follow `input_ids` (llama-cpp-python's interface)."""

    @abc.abstractmethod
    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        ...


class LlamaPromptLookupDecoding(LlamaDraftModel):
    """The tokens that followed the latest earlier occurrence of the context's last n-gram (n from
    `max_ngram_size` down to 1): drafts for text that repeats its context, with no model.

    It keeps an index of the n-grams of the context it saw last (llamacore.generation.lookup), so a
    call on that context plus a few tokens costs a few dict updates and lookups rather than a scan.
    """

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        if max_ngram_size < 1 or num_pred_tokens < 1:
            raise ValueError("max_ngram_size and num_pred_tokens must be at least 1")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens
        self._index = NgramIndex(max_ngram_size)

    @staticmethod
    def find_candidate_pred_tokens(input_ids: npt.NDArray[np.intc], max_ngram_size: int,
                                   num_pred_tokens: int) -> npt.NDArray[np.intc]:
        """llama-cpp-python's stateless lookup: after the *earliest* occurrence of the longest
        matching n-gram that has tokens after it (calls use the latest occurrence, which predicts
        recent text better; the tokens decoded are the same either way)."""
        ids = np.asarray(input_ids, dtype=np.intc)
        for n in range(min(max_ngram_size, len(ids) - 1), 0, -1):
            windows = np.lib.stride_tricks.sliding_window_view(ids, n)
            for start in np.flatnonzero((windows == ids[-n:]).all(axis=1)) + n:
                if start < len(ids):
                    return ids[start:start + num_pred_tokens]
        return np.array([], dtype=np.intc)

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        ids = [int(t) for t in input_ids]
        known = self._index.tokens
        if ids[:len(known)] != known:       # a call's context need not extend the previous one's
            self._index.reset()
        self._index.sync(ids)
        return np.asarray(self._index.continuation(self.num_pred_tokens), dtype=np.intc)
