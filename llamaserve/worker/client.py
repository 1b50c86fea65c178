"""`isolation: process`: an Engine (or embedder) in a worker process, behind the same interface.

The server keeps a vocabulary-only copy of the model (llama.cpp's `vocab_only`: tokenizer and
metadata, no weights) for tokenizing, chat templates and turning token ids into text, so only
token ids cross the process line: a request's prompt once, then one frame of sampled tokens per
engine step for all of the worker's sequences.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import msgspec

from llamacore.generation.events import Failed
from llamaserve.engine.request import GenRequest
from llamaserve.errors import QueueFullError
from llamaserve.worker.media import RemoteProjector, wire_prompt
from llamaserve.worker.process import WorkerProcess
from llamaserve.worker.protocol import LAST_EVENTS, Cancel, Step, Submission, Submit, decode_event, encode_sampling

GATHER = 0.001     # seconds an idle worker's first submission waits for others arriving with it


class WorkerEngine(WorkerProcess):
    """llamaserve.engine.engine.Engine's interface, served by a worker process. Submissions, cancels and
    the worker's frames are all handled on the event loop's thread, so its state needs no lock."""

    def __init__(self, spec: dict[str, Any], **options: Any) -> None:
        self._requests: dict[int, GenRequest] = {}
        self._ids = itertools.count(1)
        self._active = 0
        self._counts: tuple[int, int] = (0, 0)
        self._decodes: tuple[int, int, int] = (0, 0, 0)
        self._speculative = bool(spec.get("speculative"))
        self._max_queue = spec["max_queue"]
        self.adapters: dict[str, bool] = {}
        self._submitting: list[msgspec.Raw] = []       # encoded submissions not yet sent
        self._cancel_after: list[int] = []             # cancels of requests maybe among them
        super().__init__({**spec, "kind": "engine"}, **options)
        self.n_ctx_seq: int = self.info["n_ctx_seq"]
        self.capacity: int = self.info["capacity"]
        self.model = self._vocab(spec["model"], spec["model_kwargs"])
        self.projector = RemoteProjector(self) if spec.get("projector") else None

    def start(self) -> WorkerEngine:
        return self

    @property
    def active(self) -> int:
        return self._active

    @property
    def queued(self) -> int:
        return max(0, len(self._requests) - self._active)

    def speculative_counts(self) -> tuple[int, int] | None:
        return self._counts if self._speculative else None

    def decode_counts(self) -> tuple[int, int, int]:
        return self._decodes

    def has_work(self) -> bool:
        return bool(self._requests) or super().has_work()

    def submit(self, req: GenRequest) -> None:
        for path, _ in req.adapters:
            if path not in self.adapters:
                raise ValueError(f"adapter {path} is not loaded on this model")
        if len(req.tokens) >= self.n_ctx_seq:
            raise ValueError(f"prompt has {len(req.tokens)} tokens; the context holds {self.n_ctx_seq}")
        rid = next(self._ids)
        tokens, images = wire_prompt(req.tokens, req.images)
        item = self.wire.encode_item(Submission(rid, tokens, encode_sampling(req.sampling), req.max_tokens,
                                                list(req.adapters), req.n_logprobs, req.ignore_eos, req.progress,
                                                images))
        if not self.alive or self._closing:
            raise self._gone_error()
        if len(self._requests) >= self.capacity:
            raise QueueFullError(f"queue is full ({self._max_queue} waiting)")
        if not self.has_work():
            self._last_frame = time.monotonic()   # the watchdog measures this work from now
        self._requests[rid] = req
        req.on_cancel = lambda: self._cancel(rid)
        # the submissions of one event-loop turn (a request's n choices, a burst of clients) go
        # in one frame, so the worker queues them together and they share the next step
        if not self._submitting:
            if self._active or len(self._requests) > 1:
                self.loop.call_soon(self._send_submissions)     # they join the next step anyway
            else:         # an idle worker: gather a burst of arrivals into its first step
                self.loop.call_later(GATHER, self._send_submissions)
        self._submitting.append(item)

    def _send_submissions(self) -> None:
        items, self._submitting = self._submitting, []
        cancels, self._cancel_after = self._cancel_after, []
        self._send(self.wire.encode(Submit(items)))
        for rid in cancels:
            self._cancel(rid)

    def _cancel(self, rid: int) -> None:
        if rid in self._requests and self.alive:
            if self._submitting:          # it may still be waiting to be sent: cancel after it
                self._cancel_after.append(rid)
            else:
                self._send(self.wire.encode(Cancel(rid)))

    def add_adapter(self, path: str) -> None:
        """Load the adapter in the worker (FileNotFoundError / ValueError as Engine.add_adapter)."""
        path = os.fspath(path)
        self.call("add_adapter", path)
        self.adapters[path] = True

    def remove_adapter(self, path: str) -> None:
        path = os.fspath(path)
        if path not in self.adapters:
            raise KeyError(path)
        del self.adapters[path]
        self.call_async("remove_adapter", path)       # freed there when its last request ends

    def on_step(self, step: Step) -> None:
        self._active = step.active
        self._counts = (step.drafted, step.accepted)
        self._decodes = step.decodes
        for item in step.events:
            req = self._requests.pop(item.rid, None) if isinstance(item, LAST_EVENTS) else self._requests.get(item.rid)
            if req is not None:
                req.emit(decode_event(item))

    def on_exit(self, error: Exception) -> None:
        requests, self._requests = self._requests, {}
        self._active = 0
        for req in requests.values():
            req.emit(Failed(error))

    def close(self, timeout: float = 10.0) -> None:
        super().close(timeout)
        self.adapters = {}


class WorkerEmbedder(WorkerProcess):
    """llamacore.Llama's create_embedding for an embedding model, served by a worker process."""

    def __init__(self, spec: dict[str, Any], **options: Any) -> None:
        super().__init__({**spec, "kind": "embed"}, **options)
        self.model = self._vocab(spec["model"], spec["llama_kwargs"])
        self.embed_decodes = 0           # as llamacore.Llama's: the decodes its embeddings took

    def create_embedding(self, input: Any, model: str | None = None, normalize: bool = True,
                         truncate: bool = True) -> dict[str, Any]:
        result = self.call("create_embedding", input, model, normalize, truncate)
        self.embed_decodes += int(result.pop("n_decode", 0))
        return result


__all__ = ["WorkerEmbedder", "WorkerEngine"]
