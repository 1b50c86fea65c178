"""Scheduling policy for one base model: slots, the waiting queue, batch packing.

Pure Python with no llama.cpp in it, so the policy is tested in milliseconds without a model;
`llamaserve.engine.engine` executes what it plans. One step is:

    admissions = scheduler.admit()        # waiting requests into free slots (+ KV trims to do)
    plan = scheduler.schedule()           # which rows one llama_decode carries
    ...decode, sample the rows with plan.sample...
    events = scheduler.on_sampled(plan, sampled)

Each slot is a sequence of the context with an explicit state: IDLE (free; its KV may still
hold a previous prompt worth reusing), PREFILLING (prompt tokens left to decode, in chunks of
what the token budget allows), GENERATING (one sampled token to feed back each step), FINISHED
(its request ended this step; released at the next admit).

Each sequence carries its own LoRA adapter set (llamacore's Context.set_sequence_adapters), so
one decode carries every running sequence whatever its adapters: generating sequences get the
token budget first (one token each), then prompt chunks with what is left of `n_batch`. The
batch lists its rows by adapter, so each adapter's products cover only the rows that use it.
KV is reused only between requests with equal adapter sets, since K and V depend on the adapters.

Shared prefixes (with `share_prefixes`, which needs a unified KV cache): a new request whose
prompt starts like what another sequence holds gets those KV cells shared into its own sequence
(the executor's kv_copy, metadata only) instead of computing them again. When the prefix is
still being computed by a sequence admitted earlier (requests that arrive together with one long
system prompt), the request waits in the queue until that prefill has got past the prefix, as
long as the shared part is at least `share_min` tokens.

Speculative decoding (with a `drafter`): a generating sequence's row carries its next token and
draft tokens after it (llamaserve.engine.speculative), within what the budget leaves after the prompt
chunks; the executor samples each position in order and stops at the first token that differs
from the draft, so the accepted tokens are exactly what one-at-a-time decoding would sample.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from llamacore.generation.draft_pacing import DraftPacing, DraftYardstick
from llamacore.generation.events import EngineEvent, Failed, Finished, FinishReason, Token
from llamacore.generation.kv_reuse import common_prefix, reusable_prefix
from llamacore.vision.prompt import image_boundary
from llamaserve.engine.plan import Admission, Row, Slot, SlotState, StepPlan
from llamaserve.engine.prompt_cache import PromptCache
from llamaserve.engine.request import Emitted, GenRequest, Sampled
from llamaserve.engine.speculative import Drafter

log = logging.getLogger(__name__)

# After a rest, a draft model may read what it missed at up to this share of a plain step per token:
# every rest then costs at most this share of its steps (a cheap draft reads everything; one that
# costs half the model would lose more than its drafts win, and reads only the last few tokens)
READ_SHARE = 0.05


class Scheduler:
    """Slots, waiting requests and the policy that packs them into decode steps."""

    def __init__(self, n_slots: int, *, n_batch: int, n_ctx_seq: int, share_prefixes: bool = False,
                 share_min: int = 64, drafter: Drafter | None = None,
                 prompt_cache: PromptCache | None = None) -> None:
        self.slots = [Slot(seq) for seq in range(n_slots)]
        self.waiting: deque[GenRequest] = deque()
        self.n_batch = n_batch
        self.n_ctx_seq = n_ctx_seq
        self.share_prefixes = share_prefixes
        self.share_min = share_min
        self.drafter = drafter
        self.prompt_cache = prompt_cache     # idle slots' sequences, saved in host memory by the executor
        self.drafted = 0                 # draft tokens decoded, and how many of them were accepted
        self.accepted = 0
        self.verified = 0                # decode steps that verified a draft
        self._step_started = 0.0         # when the step being decoded was planned (drafting included)
        self.yardstick = DraftYardstick()    # step times and drafting's rests, kept across requests
        self._after_prompt = True        # the last step decoded a prompt (the next one plans its graph anew)

    @property
    def running(self) -> list[Slot]:
        return [s for s in self.slots if s.state in (SlotState.PREFILLING, SlotState.GENERATING)]

    def add(self, req: GenRequest) -> None:
        self.waiting.append(req)

    def admit(self) -> tuple[list[Admission], Emitted]:
        """Release finished slots, end cancelled requests, and move waiting requests into free slots.

        A request takes the free slot with the longest reusable prefix computed with its adapter set.
        """
        events: Emitted = []
        for slot in self.slots:
            if slot.state is SlotState.FINISHED:
                slot.state = SlotState.IDLE
            elif slot.req is not None and slot.req.cancelled:
                events.append(self._finish(slot, Finished(FinishReason.CANCELLED, slot.generated)))
                slot.state = SlotState.IDLE
        admitted: list[Admission] = []
        deferred: list[GenRequest] = []
        while self.waiting:
            free = [s for s in self.slots if s.state is SlotState.IDLE]
            if not free:
                break
            req = self.waiting.popleft()
            if req.cancelled:
                events.append((req, Finished(FinishReason.CANCELLED, 0)))
                continue
            # the slot with the longest reusable prefix; else the one holding the least, to keep caches
            slot = max(free, key=lambda s: (common_prefix(s.cached, req.tokens) if s.adapters == req.adapters else 0,
                                            -len(s.cached)))
            keep = reusable_prefix(slot.cached, req.tokens) if slot.adapters == req.adapters else 0
            keep = image_boundary(req.tokens, keep)
            source, shared = self._share_source(req, slot) if self.share_prefixes else (None, 0)
            coming = self._coming_prefix(req) if self.share_prefixes else 0
            if coming >= self.share_min and coming > max(keep, shared):
                deferred.append(req)        # a sequence is computing a longer shared prefix: wait for it
                continue
            restore, restored = self.prompt_cache.best(req.adapters, req.tokens) if self.prompt_cache else (None, 0)
            restored = image_boundary(req.tokens, restored)
            if restore is not None and restored > max(keep, shared, 1):    # more than a BOS to gain
                self.prompt_cache.take(restore)                            # type: ignore[union-attr]
                slot = min(free, key=lambda s: len(s.cached))              # an empty slot when there is one
                kept = 0
            else:
                restore = None
                if shared > keep:
                    keep = 0
                else:
                    source, shared = None, 0
                kept = keep
            # a slot about to lose more of its cached prompt than it keeps saves it to host memory first
            evicted = (slot.adapters, list(slot.cached)) \
                if self.prompt_cache is not None and len(slot.cached) - kept > max(kept, 1) else None
            if restore is not None:
                slot.cached = list(restore.tokens)
                keep, source, shared = restored, None, 0
            del slot.cached[keep:]
            if source is not None:
                slot.cached = list(req.tokens[:shared])
            slot.adapters, slot.req, slot.generated = req.adapters, req, 0
            slot.pacing = DraftPacing(most=self.drafter.n_draft if self.drafter else 0, yardstick=self.yardstick)
            slot.ngrams = self.drafter.index(slot.seq) if self.drafter else None
            slot.pending = list(req.tokens[len(slot.cached):])
            slot.state = SlotState.PREFILLING
            admitted.append(Admission(slot, req, keep, source, shared, restore, evicted))
        self.waiting.extendleft(reversed(deferred))
        return admitted, events

    def _share_source(self, req: GenRequest, target: Slot) -> tuple[Slot | None, int]:
        """The other sequence whose KV holds the longest prefix of `req`'s prompt (same adapters)."""
        best, best_n = None, 0
        for s in self.slots:
            if s is not target and s.adapters == req.adapters:
                n = image_boundary(req.tokens, reusable_prefix(s.cached, req.tokens))
                if n > best_n:
                    best, best_n = s, n
        return best, best_n

    def _coming_prefix(self, req: GenRequest) -> int:
        """The longest prefix of `req`'s prompt that a prefilling sequence (same adapters) will hold."""
        return max((reusable_prefix(s.req.tokens, req.tokens) for s in self.slots
                    if s.state is SlotState.PREFILLING and s.req is not None and s.adapters == req.adapters),
                   default=0)

    def forget_cache(self, slot: Slot) -> None:
        """The executor could not trim the slot's KV and cleared it: decode the whole prompt."""
        if slot.req is not None and slot.state is SlotState.PREFILLING:
            slot.pending = list(slot.req.tokens)
        slot.cached.clear()

    def forget_adapter(self, path: str) -> None:
        """An adapter was unloaded: KV computed with it must not be reused, even by a reload of its file."""
        for slot in self.slots:
            if slot.req is None and any(p == path for p, _ in slot.adapters):
                slot.cached.clear()
                slot.adapters = ()
        if self.prompt_cache is not None:
            self.prompt_cache.forget_adapter(path)

    def idle_caches(self) -> list[Slot]:
        """Idle slots (or ones whose request ended this step) whose KV holds an earlier prompt (the
        executor moves them to the prompt cache)."""
        return [s for s in self.slots if s.state in (SlotState.IDLE, SlotState.FINISHED) and s.cached]

    def uses_adapter(self, path: str) -> bool:
        """Whether a waiting or running request decodes with the adapter at `path`."""
        reqs = [*self.waiting, *(s.req for s in self.slots if s.req is not None)]
        return any(p == path for req in reqs for p, _ in req.adapters)

    def schedule(self) -> StepPlan | None:
        """The next decode step: every running sequence's rows within the token budget, or None if idle."""
        slots = self.running
        if not slots:
            return None
        self._step_started = time.perf_counter()
        slots.sort(key=lambda s: s.state is SlotState.PREFILLING)     # generating first: one token each
        budget = self.n_batch
        rows: list[Row] = []
        prompts = sum(len(s.pending) for s in slots if s.state is SlotState.PREFILLING)
        for slot in slots:
            if budget == 0:
                break
            image = slot.req.images.get(len(slot.cached)) if slot.req and slot.state is SlotState.PREFILLING else None
            if image is not None:
                if image.n_tokens > budget and rows:
                    continue                # an image decodes whole: next step, with the budget to itself
                take = slot.pending[:image.n_tokens]
                rows.append(Row(slot, take, len(slot.cached), sample=len(take) == len(slot.pending), image=image))
                slot.cached.extend(take)
                del slot.pending[:len(take)]
                budget = max(0, budget - len(take))
                continue
            take = slot.pending[:budget]
            if slot.req is not None and slot.req.images:     # text stops where the next image starts
                take = take[:next((i for i, t in enumerate(take) if t < 0), len(take))]
            draft = self._draft(slot, take, budget - len(take) - prompts)
            rows.append(Row(slot, take + draft, len(slot.cached), sample=len(take) == len(slot.pending),
                            n_draft=len(draft)))
            slot.cached.extend(take + draft)
            del slot.pending[:len(take)]
            budget -= len(take) + len(draft)
        # in the batch, rows on one adapter are neighbours: llama.cpp computes an adapter's
        # products from its first row to its last (stable: generating rows stay ahead within one)
        rows.sort(key=lambda r: r.slot.adapters)           # (path, scale) pairs: an adapter's rows stay together
        return StepPlan(rows)

    def _draft(self, slot: Slot, take: list[int], room: int) -> list[int]:
        """Draft tokens after a generating sequence's next token, in what the prompts leave of the budget."""
        if self.drafter is None or slot.state is not SlotState.GENERATING or slot.req is None:
            return []
        room = min(room, slot.pacing.limit(), self.n_ctx_seq - len(slot.cached) - 2,
                   slot.req.max_tokens - slot.generated - 1)
        if room <= 0 or slot.ngrams is None or not slot.pacing.may_draft():
            return []
        plain = self.yardstick.plain_rate       # tokens/s: READ_SHARE / plain is the read budget
        try:
            proposal = slot.ngrams.propose(slot.cached + take, room, READ_SHARE / plain if plain else None)
        except Exception:                       # a draft is only a guess: the answer goes on without
            log.exception("drafting failed for sequence %d; this request continues without drafts", slot.seq)
            slot.ngrams = None
            return []
        return proposal[:next((i for i, t in enumerate(proposal) if t < 0), len(proposal))]   # no image rows

    def on_sampled(self, plan: StepPlan, sampled: list[Sampled | list[Sampled] | BaseException]) -> Emitted:
        """Feed back what was sampled for each row of `plan.sample`: its token, or for a row with
        drafts the tokens sampled in order up to the first that differs from the draft (or the
        error sampling raised). Afterwards a slot's `cached` is what its KV must keep: the
        executor removes the positions of rejected drafts."""
        events: Emitted = []
        # a step's speed tells each sequence whether its drafts pay (llamacore.generation.draft_pacing); a step
        # that also decodes a prompt says nothing about that, nor does the next (its graph is planned anew)
        generating = all(len(r.tokens) == 1 + r.n_draft for r in plan.rows)
        paced = self.drafter is not None and generating and not self._after_prompt
        self._after_prompt = not generating
        seconds = time.perf_counter() - self._step_started
        for row, result in zip(plan.sample, sampled):
            slot, req = row.slot, row.slot.req
            draft = row.draft
            del slot.cached[len(slot.cached) - len(draft):]      # a draft's KV counts once it is accepted
            if req is None:
                continue
            if isinstance(result, BaseException):
                events.append(self._finish(slot, Failed(result)))
                continue
            accepted = 0
            for k, s in enumerate(result if isinstance(result, list) else [result]):
                if not self._feed(slot, req, s, events):
                    break
                if k < len(draft) and s.token == draft[k]:
                    slot.cached.append(s.token)       # already decoded: its KV is valid
                    slot.pending = []
                    accepted += 1
                    continue
                break
            if slot.req is req and not slot.pending:    # the last accepted draft was not followed up
                slot.pending = [slot.cached.pop()]
            if slot.req is req and slot.ngrams is not None and len(row.tokens) > 1 + len(draft):
                self._follow(slot)
            if draft:
                self.drafted += len(draft)
                self.verified += 1
                self.accepted += accepted
            if paced and draft:
                slot.pacing.record(1 + accepted, len(draft), accepted, seconds)
        if paced and any(not r.draft for r in plan.sample):
            self.yardstick.add_plain(1, seconds)      # once per step: each plain sequence got one token
        return events

    def _follow(self, slot: Slot) -> None:
        """A prompt's last chunk was decoded: the drafter reads the prompt now (see DraftIndex.follow)."""
        try:
            if slot.ngrams is not None:
                slot.ngrams.follow(slot.cached + slot.pending)
        except Exception:
            log.exception("the drafter could not read the prompt of sequence %d; no drafts for it", slot.seq)
            slot.ngrams = None

    def _feed(self, slot: Slot, req: GenRequest, s: Sampled, events: Emitted) -> bool:
        """One sampled token for `slot`; False once its request has ended."""
        if s.eog and not req.ignore_eos:        # the end-of-generation token is not output
            events.append(self._finish(slot, Finished(FinishReason.STOP, slot.generated)))
            return False
        slot.generated += 1
        events.append((req, Token(s.token, s.logprob)))
        if slot.generated >= req.max_tokens or len(slot.cached) + 1 >= self.n_ctx_seq:
            events.append(self._finish(slot, Finished(FinishReason.LENGTH, slot.generated)))
            return False
        slot.pending = [s.token]
        slot.state = SlotState.GENERATING
        return True

    def fail(self, slots: list[Slot], error: BaseException) -> Emitted:
        """End the requests of `slots` with `error`; their KV is gone (the executor cleared it)."""
        events: Emitted = []
        for slot in slots:
            slot.cached.clear()
            if slot.req is not None:
                events.append(self._finish(slot, Failed(error)))
        return events

    def close(self, error: BaseException) -> Emitted:
        """End every waiting and running request with `error`."""
        events: Emitted = [(req, Failed(error)) for req in self.waiting]
        self.waiting.clear()
        for slot in self.slots:
            if slot.req is not None:
                events.append(self._finish(slot, Failed(error)))
        return events

    def _finish(self, slot: Slot, event: EngineEvent) -> tuple[GenRequest, EngineEvent]:
        req = slot.req
        assert req is not None
        slot.req = None
        slot.pending = []
        slot.state = SlotState.FINISHED
        return req, event
