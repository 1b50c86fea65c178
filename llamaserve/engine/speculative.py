"""Draft tokens for speculative decoding by prompt lookup, and when drafting pays.

A generating sequence's next tokens often repeat what its context already holds (code edits,
rewrites, quotes, lists). Prompt lookup drafts them without a draft model: find the latest
earlier occurrence of the sequence's last n tokens and propose what followed it. The engine
decodes the drafts with the sequence's next token in the same batch and keeps those its own
sampler would have picked, so the output is what plain decoding gives.

Pure Python: the scheduler asks `PromptLookup` for drafts, and a sequence's
`llamacore.generation.draft_pacing.DraftPacing` decides how many and whether drafting pays at all.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llamacore.generation.exact_rows import exact_rows
from llamacore.generation.lookup import NgramIndex

DEFAULT_N_DRAFT = 8


class DraftIndex(Protocol):
    """One sequence's drafter: proposals after its growing context."""

    def propose(self, context: Sequence[int], limit: int, read_budget: float | None = None) -> list[int]:
        """Up to `limit` tokens after `context`; `read_budget`: the most seconds a token missed
        since the last proposal may cost to read."""
        ...

    def follow(self, context: Sequence[int]) -> bool:
        """Take in `context` now, before the first proposal after it (a prompt just decoded)."""
        ...


class Drafter(Protocol):
    """What the scheduler drafts with: prompt lookup, or a draft model (llamaserve.engine.draft_model)."""

    @property
    def n_draft(self) -> int: ...

    def index(self, seq: int = 0) -> DraftIndex: ...


def drafter_spec(settings: dict[str, Any], model: str | os.PathLike[str]) -> Any:
    """A config's checked `speculative` settings for `model` as what an Engine takes: a PromptLookup,
    or a DraftModelSpec (the engine loads the draft model next to its own). An n_draft the config
    leaves out is `default_n_draft(model)`."""
    n_draft = settings.get("n_draft") or default_n_draft(model)
    if settings.get("draft_model", "ngram") == "ngram":
        return PromptLookup(n_draft, settings["ngram_size"])
    from llamaserve.engine.draft_model import DraftModelSpec
    return DraftModelSpec(settings["draft_model"], n_draft, settings["p_min"])


def default_n_draft(model: str | os.PathLike[str]) -> int:
    """8, or fewer where ggml computes `model`'s batches of 8 rows otherwise than one row
    (llamacore.generation.exact_rows): a sequence's verify batch, its next token and the drafts, then stays
    within the rows that give plain decoding's greedy answers also where two logits nearly tie."""
    rows = exact_rows(model)
    return DEFAULT_N_DRAFT if rows is None else min(DEFAULT_N_DRAFT, rows - 1)


@dataclass(frozen=True)
class PromptLookup:
    """Up to `n_draft` tokens that followed the latest earlier occurrence of the context's last n-gram.

    Tries n-grams of `ngram` tokens down to 2 (a longer match predicts better). A sequence keeps
    an index of its context (`LookupSequence`), so a proposal costs a few dict lookups, not a scan.
    """

    n_draft: int = DEFAULT_N_DRAFT
    ngram: int = 3

    def __post_init__(self) -> None:
        if self.n_draft < 1 or self.ngram < 2:
            raise ValueError(f"invalid prompt lookup settings: n_draft={self.n_draft}, ngram={self.ngram}")

    def index(self, seq: int = 0) -> LookupSequence:
        return LookupSequence(self)

    def propose(self, context: Sequence[int], limit: int, read_budget: float | None = None) -> list[int]:
        """A proposal from a fresh index of `context` (a sequence's own index is cheaper)."""
        return self.index().propose(context, limit)


class LookupSequence:
    """One sequence's prompt lookup: an n-gram index of its context (llamacore.generation.lookup),
    which grows with the sequence, so a proposal costs a few dict lookups."""

    def __init__(self, lookup: PromptLookup) -> None:
        self.lookup = lookup
        self.index = NgramIndex(lookup.ngram, min_n=2)

    def propose(self, context: Sequence[int], limit: int, read_budget: float | None = None) -> list[int]:
        """Draft tokens after `context`, which extends the context of the previous call (else the
        index starts over); an index reads missed tokens at almost no cost (`read_budget` unused)."""
        self.index.sync(context)
        limit = min(limit, self.lookup.n_draft)
        return self.index.continuation(limit) if limit > 0 else []

    def follow(self, context: Sequence[int]) -> bool:
        self.index.sync(context)
        return True
