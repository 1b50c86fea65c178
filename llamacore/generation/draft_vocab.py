"""Whether a draft model can draft for a target: speculative decoding verifies draft token ids with
the target, so both must number the same tokens alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llamacore._core import Model

PIECE_SAMPLES = 64      # token ids compared piece by piece, spread over the vocabulary


def vocabulary_mismatch(draft: Model, target: Model) -> str | None:
    """Why `draft` cannot draft for `target` (e.g. "its vocabulary size is 512, the model's is 32000"),
    or None: the same size, BOS and EOS tokens, and the same pieces for a sample of the ids."""
    for what, mine, theirs in (("vocabulary size", draft.n_vocab, target.n_vocab),
                               ("BOS token", draft.token_bos, target.token_bos),
                               ("EOS token", draft.token_eos, target.token_eos)):
        if mine != theirs:
            return f"its {what} is {mine}, the model's is {theirs}"
    sample = range(0, target.n_vocab, max(1, target.n_vocab // PIECE_SAMPLES))
    if any(draft.token_to_piece(t, True) != target.token_to_piece(t, True) for t in sample):
        return "its tokens have other texts than the model's (another vocabulary)"
    return None


__all__ = ["vocabulary_mismatch"]
