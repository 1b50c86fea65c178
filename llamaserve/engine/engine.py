"""One loaded base model executing its scheduler's plans: continuous batching over one context.

`Engine` owns the model, its adapters, the context, the batch and each request's sampler, and
one worker thread that runs the steps `llamaserve.engine.scheduler.Scheduler` plans: admit (trim the
KV of reused slots, give each admitted sequence its request's adapter set), decode one batch of
every running sequence with the GIL released, sample each finished row with its own sampler
chain, feed the tokens back. The event loop only touches an inbox under a short lock in
`submit()`; grammar compilation (building a request's sampler), KV work and adapter loading and
freeing happen on the worker thread, outside that lock.

Adapter sets are per sequence (the vendored llama.cpp patch behind
Context.set_sequence_adapters), so requests on different adapters of one base share each
decode; the context-wide adapter set stays empty.

The KV cache is unified by default: one pool of n_ctx x parallel cells that every sequence
draws from, each sequence held to n_ctx tokens here. With per-sequence caches llama.cpp must
split a batch whose sequence ids are not consecutive into one-token micro-batches.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from llamacore import Batch, Context, LoraAdapter, Model
from llamacore.generation.events import Failed, Finished, Progress, Started
from llamacore.vision.prompt import decode_image, load_projector
from llamaserve.engine.adapter_sets import SequenceAdapters
from llamaserve.engine.draft_model import DraftModel, DraftModelSpec
from llamaserve.engine.kv import prepare_sequence, stash_idle
from llamaserve.engine.plan import StepPlan
from llamaserve.engine.prompt_cache import PromptCache
from llamaserve.engine.request import Emitted, GenRequest, Sampled
from llamaserve.engine.sampling import RequestSamplers
from llamaserve.engine.scheduler import Scheduler
from llamaserve.engine.speculative import Drafter, PromptLookup
from llamaserve.errors import EngineClosedError, QueueFullError

log = logging.getLogger(__name__)

T = TypeVar("T")


class Engine:
    """A base model, its adapters and a context of `parallel` sequences, served by one thread."""

    def __init__(self, model_path: str, adapter_paths: list[str], *, parallel: int = 4, max_queue: int = 64,
                 n_ctx: int = 2048, kv_unified: bool = True, share_prefixes: bool = True, cache_ram: int = 0,
                 speculative: PromptLookup | DraftModelSpec | None = None, projector_path: str | None = None,
                 seed: int | None = None, model_kwargs: dict[str, Any] | None = None,
                 context_kwargs: dict[str, Any] | None = None) -> None:
        self.model = Model(model_path, **(model_kwargs or {}))
        n_ctx = n_ctx or self.model.n_ctx_train
        self.adapters = {os.fspath(p): LoraAdapter(self.model, p) for p in adapter_paths}
        self.ctx = Context(self.model, n_ctx=n_ctx * parallel, n_seq_max=parallel, kv_unified=kv_unified,
                           **(context_kwargs or {}))
        self.n_ctx_seq = min(n_ctx, self.ctx.n_ctx_seq)     # tokens one sequence may hold
        self._reserve_adapter_pool()
        self.projector = (load_projector(self.model, projector_path, self.ctx.n_threads_batch) if projector_path
                          else None)
        self._image_batch = Batch(self.ctx.n_batch, embd=self.projector.n_embd) if self.projector else None
        self.max_queue = max_queue
        drafter: Drafter | None = speculative if not isinstance(speculative, DraftModelSpec) else DraftModel(
            speculative, self.model, n_seq=parallel, n_ctx_seq=self.n_ctx_seq, n_threads=self.ctx.n_threads,
            model_kwargs={k: v for k, v in (model_kwargs or {}).items() if k in ("n_gpu_layers", "main_gpu")})
        # idle slots' KV moves to host memory only from a unified cache: per-sequence caches widen no attention
        self._prompt_cache = PromptCache(cache_ram) if cache_ram > 0 and self.ctx.kv_unified else None
        # sharing a prefix between sequences copies part of one: only a unified cache can
        self.scheduler = Scheduler(parallel, n_batch=self.ctx.n_batch, n_ctx_seq=self.n_ctx_seq,
                                   share_prefixes=share_prefixes and self.ctx.kv_unified, drafter=drafter,
                                   prompt_cache=self._prompt_cache)
        self._name = os.path.basename(model_path)
        self._samplers = RequestSamplers(self.model, self.ctx, seed)
        self._inbox: deque[GenRequest] = deque()
        self._cond = threading.Condition()
        self._unfinished = 0                 # submitted requests not yet finished (queued or running)
        self._closed = False
        self._jobs: deque[tuple[Callable[[], Any], Future]] = deque()   # run on the worker between steps
        self._retired: set[str] = set()      # adapters to free once no request uses them
        self._seq_adapters = SequenceAdapters()
        self._thread: threading.Thread | None = None
        # called on the worker thread after each step (a worker process sends that step's events then)
        self.on_step: Callable[[], None] | None = None
        self.n_decode = 0                    # llama_decode calls, and the sequences they carried in all
        self.n_busy = 0

    def start(self) -> Engine:
        """Start the worker thread (once); returns the engine."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"engine:{self._name}", daemon=True)
            self._thread.start()
        return self

    # -- public, called from the event loop --------------------------------------------------

    @property
    def active(self) -> int:
        return sum(1 for s in self.scheduler.slots if s.req is not None)

    @property
    def queued(self) -> int:
        return max(0, self._unfinished - self.active)

    @property
    def capacity(self) -> int:
        """The most sequences one request can have running or queued at once."""
        return len(self.scheduler.slots) + self.max_queue

    def memory_bytes(self) -> int:
        """Weights, the KV cache and the idle sequences saved in host memory (an estimate of what unloading frees)."""
        m = self.model
        kv = 2 * m.n_layer * self.ctx.n_ctx * (m.n_embd // max(m.n_head, 1)) * m.n_head_kv * 2
        return m.size + kv + (self._prompt_cache.size if self._prompt_cache else 0)

    def speculative_counts(self) -> tuple[int, int] | None:
        """(draft tokens decoded, drafts accepted) since the model loaded; None without speculative decoding."""
        s = self.scheduler
        return None if s.drafter is None else (s.drafted, s.accepted)

    def decode_counts(self) -> tuple[int, int, int]:
        """(llama_decode calls, sequences summed over them, draft verification steps) since the model loaded."""
        return self.n_decode, self.n_busy, self.scheduler.verified

    def submit(self, req: GenRequest) -> None:
        error = self.submit_all([req])[0]
        if error is not None:
            raise error

    def submit_all(self, reqs: list[GenRequest]) -> list[Exception | None]:
        """Queue several requests at once (so they enter the same step); per request, the error
        that refused it (ValueError, EngineClosedError, QueueFullError) or None."""
        errors: list[Exception | None] = [self._check(req) for req in reqs]
        with self._cond:
            for i, req in enumerate(reqs):
                if errors[i] is not None:
                    continue
                if self._closed:
                    errors[i] = EngineClosedError("model is unloading")
                elif self._unfinished >= self.capacity:
                    errors[i] = QueueFullError(f"queue is full ({self.max_queue} waiting)")
                else:
                    self._unfinished += 1
                    self._inbox.append(req)
            self._cond.notify()
        return errors

    def _check(self, req: GenRequest) -> Exception | None:
        for path, _ in req.adapters:
            if path not in self.adapters or path in self._retired:
                return ValueError(f"adapter {path} is not loaded on this model")
        if len(req.tokens) >= self.n_ctx_seq:
            return ValueError(f"prompt has {len(req.tokens)} tokens; the context holds {self.n_ctx_seq}")
        if req.images and self.projector is None:
            return ValueError("image input is not supported: this model has no vision projector")
        return None

    def add_adapter(self, path: str) -> LoraAdapter:
        """Load the adapter at `path` onto this model (once) and return it.

        Loading runs on the worker thread between decode steps (llama.cpp's model keeps a list
        of its adapters that a decode reads). Raises FileNotFoundError or ValueError (not an
        adapter, or made for another base model) as LoraAdapter does; the engine is unaffected.
        """
        path = os.fspath(path)
        return self._on_worker(lambda: self._load_adapter(path))

    def remove_adapter(self, path: str) -> None:
        """Refuse new requests for the adapter at once; free it when its last request ends."""
        path = os.fspath(path)
        if path not in self.adapters:
            raise KeyError(path)
        with self._cond:
            self._retired.add(path)
            self._cond.notify()
        if self._thread is None:
            self._free_retired()

    def _on_worker(self, job: Callable[[], T]) -> T:
        """Run `job` on the worker thread (now, if it has not started) and return its result."""
        if self._thread is None:
            return job()
        done: Future = Future()
        with self._cond:
            if self._closed:
                raise EngineClosedError("model is unloading")
            self._jobs.append((job, done))
            self._cond.notify()
        return done.result()

    def close(self) -> None:
        """Stop the worker, fail what is queued or running, and free the context."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            inbox = list(self._inbox)
            self._inbox.clear()
            jobs = list(self._jobs)
            self._jobs.clear()
        if self._thread is not None:
            self._thread.join()
        error = EngineClosedError("model was unloaded")
        for _, done in jobs:
            done.set_exception(error)
        self._emit([(req, Failed(error)) for req in inbox] + self.scheduler.close(error))
        self._samplers.close()
        self.adapters = {}
        self.ctx = None       # type: ignore[assignment]  # frees the context now; the engine is done
        self.model = None     # type: ignore[assignment]

    # -- worker ------------------------------------------------------------------------------

    def _loop(self) -> None:
        batch = Batch(self.ctx.n_batch, n_seq_max=1)
        while True:
            with self._cond:
                while not (self._closed or self._inbox or self._unfinished or self._jobs or self._retired):
                    self._cond.wait()
                if self._closed:
                    return
                arrived = list(self._inbox)
                self._inbox.clear()
                jobs = list(self._jobs)
                self._jobs.clear()
            for job, done in jobs:
                try:
                    done.set_result(job())
                except BaseException as exc:    # the caller gets the error; the worker lives on
                    done.set_exception(exc)
            try:
                self._accept(arrived)
                self._free_retired()
                self._admit()
                plan = self.scheduler.schedule()
                if plan is not None:
                    self._step(plan, batch)
            except Exception as exc:
                self._fail_running(exc)
            if self.on_step is not None:
                self.on_step()
            if self._prompt_cache is not None and not self._unfinished:     # idle: stop when work comes
                stash_idle(self.ctx, self.scheduler, self._prompt_cache,
                           until=lambda: bool(self._closed or self._inbox or self._jobs))

    def _accept(self, arrived: list[GenRequest]) -> None:
        """Build each new request's sampler (a grammar compiles here) and queue it for a slot."""
        for req in arrived:
            try:
                self._samplers.add(req)
            except Exception as exc:     # a bad request fails alone; the worker thread must live on
                self._emit([(req, Failed(exc))])
                continue
            self.scheduler.add(req)

    def _load_adapter(self, path: str) -> LoraAdapter:
        with self._cond:
            self._retired.discard(path)      # re-added before its last request ended: keep it
        if path not in self.adapters:
            self.adapters[path] = LoraAdapter(self.model, path)
            self._reserve_adapter_pool()
        return self.adapters[path]

    def _reserve_adapter_pool(self) -> None:
        """Copy adapters into llama.cpp's slot pool now (at load, or when one is added), else the first
        step mixing them allocates and fills it (up to 1.5 s for eight rank-64 adapters of a 155M model
        on 2 cores). One per sequence at most: a step mixes no more, and the pool is an F32 copy."""
        if not self.adapters:
            return
        try:
            self.ctx.reserve_adapter_pool(list(self.adapters.values())[:self.ctx.n_seq_max])
        except (MemoryError, ValueError) as exc:   # mixed steps then fill it themselves, or go per adapter
            log.warning("LoRA slot pool of %s not reserved: %s", self._name, exc)

    def _free_retired(self) -> None:
        """Free retired adapters that no queued or running request uses (on the worker thread)."""
        with self._cond:
            retired = [p for p in self._retired if not self.scheduler.uses_adapter(p)]
            self._retired.difference_update(retired)
        for path in retired:
            self._seq_adapters.release(self.ctx, path)
            self.scheduler.forget_adapter(path)
            del self.adapters[path]           # the last reference: llama.cpp frees it now

    def _admit(self) -> None:
        admitted, events = self.scheduler.admit()
        self._emit(events)
        for a in admitted:
            prepare_sequence(self.ctx, a, self.scheduler, self._prompt_cache)
            try:
                self._seq_adapters.attach(self.ctx, self.adapters, a)
            except Exception as exc:     # fails this request alone
                self._emit(self.scheduler.fail([a.slot], exc))
                continue
            now = time.monotonic()
            self._emit([(a.req, Started(len(a.slot.cached), now))])
            if a.req.progress:          # the first report: what the cache held, before any decode
                self._emit([(a.req, Progress(len(a.slot.cached), now))])
        if admitted and self._prompt_cache is not None:     # a task starts: idle KV goes to host memory
            stash_idle(self.ctx, self.scheduler, self._prompt_cache)

    def _fail_running(self, exc: Exception) -> None:
        """An unexpected error ends the running requests, not the worker: a dead worker hangs them all."""
        log.exception("engine step failed; ending %d running requests", self.active)
        for slot in self.scheduler.slots:
            self.ctx.kv_remove(slot.seq, 0, -1)
        self._emit(self.scheduler.fail(self.scheduler.slots, exc))

    def _step(self, plan: StepPlan, batch: Batch) -> None:
        early = self._decode_images(plan)       # images first: each needs a decode call of its own
        rows = [r for r in plan.rows if r.image is None]
        batch.clear()
        out_index = []                  # per sampled row: the batch index of its first sampled position
        for row in rows:
            if row.n_draft:             # logits after the next token and after each draft token
                first = len(row.tokens) - row.n_draft - 1
                for k, token in enumerate(row.tokens):
                    batch.add(token, row.pos + k, row.slot.seq, logits=k >= first)
                out_index.append(batch.n_tokens - row.n_draft - 1)
            else:
                batch.add_sequence(row.tokens, row.pos, row.slot.seq, logits_last=row.sample)
                if row.sample:
                    out_index.append(batch.n_tokens - 1)
        try:
            if rows:
                self.ctx.decode(batch)
        except Exception as exc:        # a failed decode ends the requests in it, not the server
            for row in rows:
                self.ctx.kv_remove(row.slot.seq, 0, -1)
            self._emit(self.scheduler.fail([r.slot for r in rows], exc))
            rows = []
        self.n_decode += bool(rows)
        self.n_busy += len(rows)
        now = time.monotonic()
        self._emit([(row.slot.req, Progress(row.pos + len(row.tokens), now)) for row in plan.rows
                    if row.slot.req is not None and row.slot.req.progress and row.slot.generated == 0
                    and not row.n_draft])
        sampled: list[Sampled | list[Sampled] | BaseException] = []
        indices = iter(out_index)
        for row in plan.sample:
            if row.image is not None:
                sampled.append(early.get(id(row)) or EngineClosedError("the request ended"))
                continue
            index = next(indices)
            req = row.slot.req
            if req is None:                 # its decode failed in this step (on_sampled skips it)
                sampled.append(EngineClosedError("the request ended"))
                continue
            try:
                sampled.append(self._samplers.verify(req, index, row.draft) if row.n_draft
                               else self._samplers.sample(req, index))
            except Exception as exc:
                sampled.append(exc)
        self._emit(self.scheduler.on_sampled(plan, sampled))
        for row in plan.rows:
            if row.n_draft:             # the KV of rejected drafts goes
                self.ctx.kv_remove(row.slot.seq, len(row.slot.cached), -1)

    def _decode_images(self, plan: StepPlan) -> dict[int, Sampled | BaseException]:
        """Encode and decode the image rows of `plan`, one call each; a failure ends only its request.
        An image that ends a prompt is sampled at once (the next decode replaces its logits):
        returned by id(row)."""
        early: dict[int, Sampled | BaseException] = {}
        for row in plan.rows:
            if row.image is None or row.slot.req is None:
                continue
            assert self.projector is not None and self._image_batch is not None   # _check refused it otherwise
            try:
                decode_image(self.ctx, self._image_batch, self.projector, row.image, row.pos, row.slot.seq,
                             logits_last=row.sample)
                self.n_decode += 1
                self.n_busy += 1
                if row.sample:
                    early[id(row)] = self._samplers.sample(row.slot.req, -1)
            except Exception as exc:
                self.ctx.kv_remove(row.slot.seq, 0, -1)
                if row.sample:
                    early[id(row)] = exc
                else:
                    self._emit(self.scheduler.fail([row.slot], exc))
        return early

    def _emit(self, events: Emitted) -> None:
        """Deliver events; a request's final event releases its sampler and its place in the queue."""
        ended = 0
        for req, event in events:
            if isinstance(event, (Finished, Failed)):
                self._samplers.release(req)
                ended += 1
            req.emit(event)
        if ended:
            with self._cond:
                self._unfinished -= ended


__all__ = ["Engine"]
