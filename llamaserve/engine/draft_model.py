"""Draft tokens from a small draft model (speculative decoding), for the engine's scheduler.

The draft model runs on the engine's thread, in a context of its own with one sequence per
engine slot. Before each step the scheduler asks a generating sequence's `DraftSequence` for up
to n tokens after its context: the draft sequence first catches up with the context (decoding
what it has not seen, dropping what was rejected since), then drafts greedily, one decode per
token, stopping early below `p_min`. The engine verifies the drafts in its shared batch exactly
as it verifies prompt-lookup drafts, so outputs are what plain decoding gives.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from llamacore import Batch, Context, Model
from llamacore.generation.draft_vocab import vocabulary_mismatch
from llamacore.generation.kv_reuse import common_prefix


@dataclass(frozen=True)
class DraftModelSpec:
    """What a config's `speculative: {draft_model: PATH, n_draft, p_min}` asks for."""

    path: str
    n_draft: int = 8
    p_min: float = 0.0


READ_WINDOW = 8         # tokens read after a rest where reading every missed one costs too much
READ_TIMED = 16         # the fewest tokens read in one go that time a token's reading


class DraftModel:
    """A draft model loaded for one engine's target model (same vocabulary)."""

    def __init__(self, spec: DraftModelSpec, target: Model, *, n_seq: int, n_ctx_seq: int,
                 model_kwargs: dict[str, Any] | None = None, n_threads: int | None = None) -> None:
        self.spec = spec
        self.n_draft = spec.n_draft
        self.model = Model(spec.path, **(model_kwargs or {}))
        if (reason := vocabulary_mismatch(self.model, target)) is not None:
            raise ValueError(f"draft model {os.path.basename(spec.path)} does not match the model it drafts for: "
                             f"{reason}")
        self.ctx = Context(self.model, n_ctx=n_ctx_seq * n_seq, n_seq_max=n_seq, kv_unified=True,
                           n_threads=n_threads, n_threads_batch=n_threads)
        self.n_ctx_seq = n_ctx_seq
        self.batch = Batch(self.ctx.n_batch)
        self.decodes = 0                      # draft-model decode calls, for tests and metrics
        self.read_seconds: float | None = None   # seconds to read one token of a context (batched, average)
        self._sequences: dict[int, DraftSequence] = {}

    def index(self, seq: int = 0) -> DraftSequence:
        """Sequence `seq`'s drafter; it keeps what the draft context holds across requests (a
        new request that starts like the last one reuses that prefix)."""
        if seq not in self._sequences:
            self._sequences[seq] = DraftSequence(self, seq)
        return self._sequences[seq]


class DraftSequence:
    """One engine sequence's drafts: the draft context's sequence `seq` follows its tokens."""

    def __init__(self, draft: DraftModel, seq: int) -> None:
        self.draft = draft
        self.seq = seq
        self.known: list[int] = []            # the context the draft sequence has read up to
        self.offset = 0                       # known[offset:] is in its KV, at positions from 0
        draft.ctx.kv_remove(seq, 0, -1)

    def propose(self, context: Sequence[int], limit: int, read_budget: float | None = None) -> list[int]:
        """Up to `limit` (and n_draft) greedy draft tokens after `context`; [] for a context with
        images (the draft model has no projector) or one that would not fit. `read_budget`: the
        most seconds a token missed since the last draft may cost to read (see `follow`)."""
        d = self.draft
        limit = min(limit, d.n_draft, d.n_ctx_seq - len(context) - 1)
        window = None
        if read_budget is not None and d.read_seconds is not None and d.read_seconds > read_budget:
            window = READ_WINDOW
        if limit <= 0 or not self.follow(context, window):
            return []
        ctx, batch = d.ctx, d.batch
        out: list[int] = []
        while True:
            logits = ctx.logits(-1)
            token = int(np.argmax(logits))
            if d.spec.p_min > 0 and _probability(logits, token) < d.spec.p_min:
                break
            if d.model.is_eog(token):
                break
            out.append(token)
            if len(out) >= limit:
                break
            batch.clear()
            batch.add(token, len(self.known) - self.offset, self.seq, logits=True)
            ctx.decode(batch)
            d.decodes += 1
            self.known.append(token)
        return out

    def follow(self, context: Sequence[int], window: int | None = None) -> bool:
        """Make the draft context hold `context`, its last token's logits current; False (nothing
        done) for a context with images or one that does not fit. The scheduler calls it when a
        prompt is done, so the draft model reads the prompt before the first token is out, as
        llama.cpp's server does, not in the first step that drafts.

        After a rest (steps in which the sequence did not draft) the draft reads every token it
        missed, in batches: a draft that saw only the last few tokens agrees with the target far
        less often (on the speculative benchmark's deep sibling pair, 15-24% of drafted tokens
        accepted against 58-62%). With `window`, when more tokens than that wait, it starts over
        from the last `window` only (llama.cpp's sequences take no gaps): the caller's choice for
        a draft model that reads a token at a good part of a target step's cost, whose reading
        after every rest would cost more than its drafts can win.
        """
        d = self.draft
        if not context or len(context) >= d.n_ctx_seq or any(t < 0 for t in context[len(self.known):]):
            return False
        keep = common_prefix(self.known, context)
        if keep == len(context):              # the last token must be decoded again for its logits
            keep -= 1
        if window is not None and keep > 0 and len(context) - keep > window:
            self.offset = keep = len(context) - window
            self.known = list(context[:keep])
            d.ctx.kv_remove(self.seq, 0, -1)
        elif keep < self.offset:              # another text: read it whole
            keep, self.offset, self.known = 0, 0, []
            d.ctx.kv_remove(self.seq, 0, -1)
        if keep < len(self.known):
            d.ctx.kv_remove(self.seq, keep - self.offset, -1)
            del self.known[keep:]
        ctx, batch, step = d.ctx, d.batch, d.ctx.n_batch
        started, missed = time.perf_counter(), len(context) - len(self.known)
        for first in range(len(self.known), len(context), step):
            piece = list(context[first:first + step])
            batch.clear()
            batch.add_sequence(piece, first - self.offset, self.seq, logits_last=True)
            ctx.decode(batch)
            d.decodes += 1
            self.known.extend(piece)
        if missed >= READ_TIMED:              # a batch long enough to time reading by
            seconds = (time.perf_counter() - started) / missed
            d.read_seconds = seconds if d.read_seconds is None else 0.8 * d.read_seconds + 0.2 * seconds
        return True


def _probability(logits: np.ndarray, token: int) -> float:
    """softmax(logits)[token]."""
    return float(1.0 / np.exp(logits - logits[token]).sum())
