"""What the scheduler (llamaserve.engine.scheduler) plans with: a slot (one sequence of the context and
its state), an admission (a request placed in a slot, with the KV work to do first), and a step's
rows (the tokens one llama_decode carries per sequence)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llamacore.generation.draft_pacing import DraftPacing
from llamacore.generation.kv_reuse import AdapterKey
from llamaserve.engine.prompt_cache import CachedPrompt
from llamaserve.engine.request import GenRequest
from llamaserve.engine.speculative import DraftIndex

if TYPE_CHECKING:
    from llamacore import ImageChunk


class SlotState(enum.Enum):
    IDLE = "idle"
    PREFILLING = "prefilling"
    GENERATING = "generating"
    FINISHED = "finished"


@dataclass(eq=False)
class Slot:
    seq: int
    state: SlotState = SlotState.IDLE
    cached: list[int] = field(default_factory=list)    # tokens whose KV is in this sequence
    adapters: AdapterKey = ()                          # the adapter set `cached` was computed with
    req: GenRequest | None = None
    pending: list[int] = field(default_factory=list)   # prompt left to decode, or the token to feed back
    generated: int = 0
    pacing: DraftPacing = field(default_factory=DraftPacing)
    ngrams: DraftIndex | None = None                   # the drafter's state for this sequence


@dataclass(frozen=True)
class Admission:
    """A request placed in a slot; the executor saves the slot's sequence to the prompt cache when
    `evicted` is set (its adapters and tokens), loads `restore` into the slot when that is set, trims
    the slot's KV to `keep` tokens, then, when `source` is set, shares that slot's first `shared`
    positions into it (keep is 0 then)."""

    slot: Slot
    req: GenRequest
    keep: int
    source: Slot | None = None
    shared: int = 0
    restore: CachedPrompt | None = None     # a saved sequence to load into the slot first
    evicted: tuple[AdapterKey, list[int]] | None = None   # what the slot held, to save before all that


@dataclass(frozen=True)
class Row:
    """Tokens of one sequence in a batch; `sample` when the last one's logits are sampled.

    The last `n_draft` tokens are drafts: the logits after each of the last n_draft + 1 tokens
    are sampled in order until one differs from the draft.
    """

    slot: Slot
    tokens: list[int]
    pos: int
    sample: bool
    n_draft: int = 0
    image: ImageChunk | None = None      # the tokens are an image's placeholders: decode its embeddings

    @property
    def draft(self) -> list[int]:
        return self.tokens[len(self.tokens) - self.n_draft:] if self.n_draft else []


@dataclass
class StepPlan:
    rows: list[Row]
    sample: list[Row] = field(init=False)     # the rows whose last token is sampled, in row order

    def __post_init__(self) -> None:
        self.sample = [r for r in self.rows if r.sample]
