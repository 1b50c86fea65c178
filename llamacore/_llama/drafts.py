"""`Llama(draft_model=...)`: what drafts the tokens a Llama verifies. A `LlamaDraftModel` drafts
itself; another `Llama` of the same vocabulary drafts greedily in its own context."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from llamacore._llama.host import LlamaHost
from llamacore.generation.draft_vocab import vocabulary_mismatch
from llamacore.llama_speculative import LlamaDraftModel


class LlamaModelDraft(LlamaDraftModel):
    """Greedy drafts from a small `Llama` of the same vocabulary (its context keeps the prefix);
    `max_tokens` (how long Llama lets the draft be) saves decoding drafts that would be cut."""

    def __init__(self, llama: LlamaHost, num_pred_tokens: int = 8) -> None:
        self.llama = llama
        self.num_pred_tokens = num_pred_tokens

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **kwargs: Any) -> npt.NDArray[np.intc]:
        llm = self.llama
        ids = [int(t) for t in input_ids]
        limit = min(llm.ctx.n_ctx - len(ids) - 1, self.num_pred_tokens, int(kwargs.get("max_tokens", 1 << 30)))
        if limit <= 0:
            return np.empty(0, dtype=np.intc)
        out: list[int] = []
        llm._eval(ids)
        while True:
            token = int(np.argmax(llm.ctx.logits(-1)))
            if llm.model.is_eog(token):
                break
            out.append(token)
            if len(out) >= limit:
                break                    # the last draft is decoded with the next call's tokens, if kept
            llm._append([token])
        return np.asarray(out, dtype=np.intc)


def draft_source(draft_model: Any, target: LlamaHost) -> LlamaDraftModel | None:
    """`Llama(draft_model=...)` as a LlamaDraftModel: one already, or a Llama (checked: the same
    vocabulary as `target`)."""
    if draft_model is None or isinstance(draft_model, LlamaDraftModel):
        return draft_model
    if isinstance(draft_model, LlamaHost):
        if (reason := vocabulary_mismatch(draft_model.model, target.model)) is not None:
            raise ValueError(f"draft_model does not match this model: {reason}")
        return LlamaModelDraft(draft_model)
    if callable(draft_model):
        return draft_model
    raise ValueError("draft_model must be a LlamaDraftModel (e.g. LlamaPromptLookupDecoding()) or a Llama")


__all__ = ["LlamaModelDraft", "draft_source"]
