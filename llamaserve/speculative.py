"""Draft tokens for speculative decoding by prompt lookup, and when drafting pays.

A generating sequence's next tokens often repeat what its context already holds (code edits,
rewrites, quotes, lists). Prompt lookup drafts them without a draft model: find the latest
earlier occurrence of the sequence's last n tokens and propose what followed it. The engine
decodes the drafts with the sequence's next token in the same batch and keeps those its own
sampler would have picked, so the output is what plain decoding gives.

Pure Python: the scheduler asks `PromptLookup` for drafts; `DraftPacing` stops drafting for a
sequence whose drafts keep being rejected (each rejected token costs a batch row).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PromptLookup:
    """Up to `n_draft` tokens that followed an earlier occurrence of the context's last n-gram.

    Tries n-grams of `ngram` tokens down to 2 (a longer match predicts better), looking back
    at most `window` tokens.
    """

    n_draft: int = 8
    ngram: int = 3
    window: int = 4096

    def __post_init__(self) -> None:
        if self.n_draft < 1 or self.ngram < 2 or self.window < self.ngram:
            raise ValueError(f"invalid prompt lookup settings: n_draft={self.n_draft}, ngram={self.ngram}")

    def propose(self, context: Sequence[int], limit: int) -> list[int]:
        limit = min(limit, self.n_draft)
        if limit <= 0:
            return []
        ctx = list(context[-self.window:])
        for n in range(min(self.ngram, len(ctx) - 1), 1, -1):
            tail = ctx[-n:]
            # the latest earlier start of the same n-gram, not the tail itself
            for start in range(len(ctx) - n - 1, -1, -1):
                if ctx[start] == tail[0] and ctx[start:start + n] == tail:
                    follow = ctx[start + n:start + n + limit]
                    if follow:
                        return follow
                    break
        return []


@dataclass
class DraftPacing:
    """Per sequence: after `patience` verifications in a row that accept nothing, no drafts for
    `cooldown` steps (a non-repetitive text would otherwise pay rejected rows every step)."""

    patience: int = 3
    cooldown: int = 16
    misses: int = 0
    resting: int = 0

    def may_draft(self) -> bool:
        if self.resting > 0:
            self.resting -= 1
            return False
        return True

    def verified(self, accepted: int) -> None:
        self.misses = 0 if accepted else self.misses + 1
        if self.misses >= self.patience:
            self.misses, self.resting = 0, self.cooldown
