"""One loaded base model and its scheduler: continuous batching over the sequences of one context.

A worker thread owns the llama.cpp context. Each step it builds one batch from every active
sequence of one adapter group (a generated token each, plus prompt chunks up to n_batch),
calls decode once with the GIL released, and samples each sequence with its own sampler chain.
LoRA adapters apply to a whole context, so sequences with different adapter sets never share
a decode: groups take turns (round robin) of up to `lora_steps_per_turn` steps each, so no
group starves: a group with work waits at most (groups - 1) x lora_steps_per_turn steps. A turn
is longer than one step because every adapter switch makes llama.cpp rebuild its compute
graph reservation (milliseconds on a small model), which one-step turns would pay every step.

The KV cache is unified by default: one pool of n_ctx x parallel cells that every sequence
draws from, each sequence held to n_ctx tokens here. With per-sequence caches llama.cpp must
split a batch whose sequence ids are not consecutive into one-token micro-batches, which is
what a LoRA group's subset of the slots usually is.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamacore import Batch, Context, LoraAdapter, Model
from llamacore.completion import TokenLogprob
from llamacore.llama import common_prefix
from llamacore.sampling import SamplingParams

log = logging.getLogger("llamaserve.engine")

AdapterKey = tuple[tuple[str, float], ...]     # ((adapter path, scale), ...) with scale != 0, sorted


class QueueFullError(Exception):
    """The model's queue is at max_queue; the client should retry later."""


class EngineClosedError(Exception):
    """The model was unloaded while the request waited or ran."""


@dataclass(eq=False)
class GenRequest:
    """A generation job; the engine reports through `emit(kind, value, extra)` from its thread."""

    tokens: list[int]
    sampling: SamplingParams
    max_tokens: int
    adapters: AdapterKey
    emit: Callable[[str, Any, Any], None]
    n_logprobs: int | None = None
    ignore_eos: bool = False
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass(eq=False)
class _Slot:
    seq: int
    cached: list[int] = field(default_factory=list)    # tokens whose KV is in this sequence
    adapters: AdapterKey = ()
    req: GenRequest | None = None
    sampler: Any = None
    pending: list[int] = field(default_factory=list)   # tokens still to decode
    generated: int = 0
    out_index: int = -1                                # batch row of this slot's output, or -1


class Engine:
    """A base model, its adapters and a context of `parallel` sequences, served by one thread."""

    def __init__(self, model_path: str, adapter_paths: list[str], *, parallel: int = 4, max_queue: int = 64,
                 n_ctx: int = 2048, lora_steps_per_turn: int = 8, kv_unified: bool = True,
                 model_kwargs: dict[str, Any] | None = None, context_kwargs: dict[str, Any] | None = None) -> None:
        if lora_steps_per_turn < 1:
            raise ValueError(f"lora_steps_per_turn must be at least 1, got {lora_steps_per_turn}")
        self.model = Model(model_path, **(model_kwargs or {}))
        n_ctx = n_ctx or self.model.n_ctx_train
        self.adapters = {os.fspath(p): LoraAdapter(self.model, p) for p in adapter_paths}
        self.ctx = Context(self.model, n_ctx=n_ctx * parallel, n_seq_max=parallel, kv_unified=kv_unified,
                           **(context_kwargs or {}))
        self.n_ctx = min(n_ctx, self.ctx.n_ctx_seq)     # tokens one sequence may hold
        self.max_queue = max_queue
        self.lora_steps_per_turn = lora_steps_per_turn
        self._slots = [_Slot(seq) for seq in range(parallel)]
        self._queue: deque[GenRequest] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._groups: deque[AdapterKey] = deque()      # round-robin order of adapter groups
        self._turn: AdapterKey | None = None           # the group whose turn it is
        self._turn_steps = 0                           # steps that group has had in this turn
        self._applied: AdapterKey | None = None
        self.steps = 0
        self._thread = threading.Thread(target=self._loop, name=f"engine:{os.path.basename(model_path)}",
                                        daemon=True)
        self._thread.start()

    # -- public, called from the event loop --------------------------------------------------

    @property
    def active(self) -> int:
        return sum(1 for s in self._slots if s.req is not None)

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def capacity(self) -> int:
        """The most sequences one request can have running or queued at once."""
        return len(self._slots) + self.max_queue

    def memory_bytes(self) -> int:
        """Weights plus the KV cache (an estimate of what unloading frees)."""
        m = self.model
        kv = 2 * m.n_layer * self.ctx.n_ctx * (m.n_embd // max(m.n_head, 1)) * m.n_head_kv * 2
        return m.size + kv

    def submit(self, req: GenRequest) -> None:
        for path, _ in req.adapters:
            if path not in self.adapters:
                raise ValueError(f"adapter {path} is not loaded on this model")
        if len(req.tokens) >= self.n_ctx:
            raise ValueError(f"prompt has {len(req.tokens)} tokens; the context holds {self.n_ctx}")
        with self._cond:
            if self._closed:
                raise EngineClosedError("model is unloading")
            free = sum(1 for s in self._slots if s.req is None)
            if len(self._queue) >= self.max_queue + free:
                raise QueueFullError(f"queue is full ({self.max_queue} waiting)")
            self._queue.append(req)
            self._cond.notify()

    def close(self) -> None:
        """Stop the worker, fail what is queued or running, and free the context."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        for req in [*self._queue, *(s.req for s in self._slots if s.req)]:
            req.emit("error", EngineClosedError("model was unloaded"), None)
        self._queue.clear()
        self.ctx = None
        self.adapters = {}
        self.model = None

    # -- worker ------------------------------------------------------------------------------

    def _loop(self) -> None:
        batch = Batch(self.ctx.n_batch, n_seq_max=1)
        while True:
            with self._cond:
                while not self._closed and not self._queue and not self.active:
                    self._cond.wait()
                if self._closed:
                    return
                try:
                    self._admit()
                except Exception as exc:
                    self._fail_running(exc)
            try:
                self._reap_cancelled()
                if self.active:
                    self._step(batch)
            except Exception as exc:
                self._fail_running(exc)

    def _fail_running(self, exc: Exception) -> None:
        """An unexpected error ends the running requests, not the worker: a dead worker hangs them all."""
        log.exception("engine step failed; ending %d running requests", self.active)
        self._applied = None            # adapter state unknown: apply again on the next step
        for slot in self._slots:
            self.ctx.kv_remove(slot.seq, 0, -1)
            slot.cached.clear()
            if slot.req is not None:
                self._finish(slot, "error", exc)

    def _admit(self) -> None:
        """Move queued requests into free slots, preferring the slot with the longest reusable prefix."""
        while self._queue:
            free = [s for s in self._slots if s.req is None]
            if not free:
                return
            req = self._queue.popleft()
            if req.cancelled:
                req.emit("end", "cancelled", 0)
                continue
            try:
                sampler = req.sampling.build(self.model)
            except Exception as exc:     # a bad request fails alone; the worker thread must live on
                req.emit("error", exc, 0)
                continue
            best = max(free, key=lambda s: common_prefix(s.cached, req.tokens) if s.adapters == req.adapters else -1)
            keep = common_prefix(best.cached, req.tokens) if best.adapters == req.adapters else 0
            keep = min(keep, len(req.tokens) - 1)
            if not self.ctx.kv_remove(best.seq, keep, -1):
                self.ctx.kv_remove(best.seq, 0, -1)      # removing a whole sequence always works
                keep = 0
            del best.cached[keep:]
            best.adapters = req.adapters
            best.req = req
            best.sampler = sampler
            best.pending = list(req.tokens[keep:])
            best.generated = 0
            if req.adapters not in self._groups:
                self._groups.append(req.adapters)

    def _reap_cancelled(self) -> None:
        for slot in self._slots:
            if slot.req is not None and slot.req.cancelled:
                self._finish(slot, "end", "cancelled")

    def _next_group(self) -> AdapterKey:
        live = {s.req.adapters for s in self._slots if s.req is not None}
        if self._turn in live and self._turn_steps < self.lora_steps_per_turn:
            self._turn_steps += 1
            return self._turn
        while self._groups[0] not in live:
            self._groups.popleft()
        self._turn, self._turn_steps = self._groups[0], 1
        self._groups.rotate(-1)
        return self._turn

    def _apply(self, group: AdapterKey) -> None:
        if group != self._applied:
            self.ctx.set_adapters({self.adapters[p]: s for p, s in group})
            self._applied = group

    def _step(self, batch: Batch) -> None:
        group = self._next_group()
        self._apply(group)
        batch.clear()
        budget = self.ctx.n_batch
        slots = [s for s in self._slots if s.req is not None and s.req.adapters == group]
        # Generating sequences first (one token each), then prompt chunks with what is left.
        slots.sort(key=lambda s: len(s.pending) > 1)
        for slot in slots:
            slot.out_index = -1
            if budget == 0:
                continue
            take = slot.pending[:budget]
            pos = len(slot.cached)
            batch.add_sequence(take, pos, slot.seq, logits_last=len(take) == len(slot.pending))
            if len(take) == len(slot.pending):
                slot.out_index = batch.n_tokens - 1
            slot.cached.extend(take)
            del slot.pending[:len(take)]
            budget -= len(take)
        try:
            self.ctx.decode(batch)
        except Exception as exc:        # a failed decode ends the requests in it, not the server
            for slot in slots:
                self.ctx.kv_remove(slot.seq, 0, -1)
                slot.cached.clear()
                self._finish(slot, "error", exc)
            return
        self.steps += 1
        for slot in slots:
            if slot.out_index >= 0:
                try:
                    self._sample(slot)
                except Exception as exc:
                    self._finish(slot, "error", exc)

    def _sample(self, slot: _Slot) -> None:
        req = slot.req
        token = slot.sampler.sample(self.ctx, slot.out_index)
        entry = None
        if req.n_logprobs is not None:
            entry = TokenLogprob.from_logits(self.ctx.logits(slot.out_index), token, req.n_logprobs,
                                             lambda t: self.model.token_to_piece(t).decode("utf-8", "replace"))
        slot.generated += 1
        if not req.ignore_eos and self.model.is_eog(token):
            self._finish(slot, "end", "stop")
            return
        req.emit("token", token, entry)
        if slot.generated >= req.max_tokens or len(slot.cached) + 1 >= self.n_ctx:
            self._finish(slot, "end", "length")
        else:
            slot.pending = [token]

    def _finish(self, slot: _Slot, kind: str, value: Any) -> None:
        req = slot.req
        slot.req = None
        slot.sampler = None
        slot.pending = []
        slot.out_index = -1
        req.emit(kind, value, slot.generated)
