"""A loaded base model: what serves it (an engine, or an embedder) and the aliases it serves."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import gc
import os
import time
from dataclasses import dataclass, field

import llamacore._core
from llamacore import Llama, Model
from llamacore.chat.templates import resolve_template
from llamaserve.engine import Engine
from llamaserve.settings import ModelEntry
from llamaserve.worker_engine import WorkerEmbedder, WorkerEngine
from llamaserve.worker_process import WorkerProcess


@dataclass(eq=False)
class Loaded:
    """A loaded base model and the aliases it serves."""

    key: tuple
    entries: list[ModelEntry]
    engine: Engine | WorkerEngine | None = None      # generation models
    embedder: Llama | WorkerEmbedder | None = None   # embedding models (one request at a time, in a thread)
    embed_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    in_use: int = 0
    last_used: float = field(default_factory=time.monotonic)
    load_seconds: float = 0.0
    templates: dict[str, str] = field(default_factory=dict)

    @property
    def model(self) -> Model:
        if self.engine is not None:
            return self.engine.model
        assert self.embedder is not None, "an unloaded base has no model"
        return self.embedder.model

    @property
    def worker(self) -> WorkerProcess | None:
        """The worker process serving this base (isolation: process), else None."""
        for part in (self.engine, self.embedder):
            if isinstance(part, WorkerProcess):
                return part
        return None

    def memory_bytes(self) -> int:
        if self.engine is not None:
            return self.engine.memory_bytes()
        return self.embedder.memory_bytes() if isinstance(self.embedder, WorkerEmbedder) else self.model.size

    def embedding_size(self) -> int:
        """Length of the embedding vectors this (embedding) model returns."""
        if isinstance(self.embedder, WorkerEmbedder):
            return int(self.embedder.info["n_embd_out"])     # the server's copy has no weights or sizes
        return self.model.n_embd_out

    def embedding_pooling(self) -> str:
        """How this (embedding) model pools token vectors: "mean", "cls", "last", "rank", or "none"
        (one vector per token)."""
        if isinstance(self.embedder, WorkerEmbedder):
            return str(self.embedder.info.get("pooling", "unspecified"))
        assert self.embedder is not None, "not an embedding model"
        return self.embedder.ctx.pooling

    def close_crashed(self) -> None:
        """After a worker crash: reap the worker and hand freed memory back; requests that still
        hold this object get WorkerCrashedError from the dead worker."""
        worker = self.worker
        if worker is not None:
            worker.close()
        gc.collect()
        _trim_heap()

    def chat_template(self, entry: ModelEntry) -> str:
        if entry.alias not in self.templates:
            self.templates[entry.alias] = resolve_template(entry.chat_format, entry.chat_template,
                                                           self.model.chat_template())
        return self.templates[entry.alias]

    def busy(self) -> bool:
        return self.in_use > 0 or (self.engine is not None and bool(self.engine.active or self.engine.queued))

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        if isinstance(self.embedder, WorkerEmbedder):
            self.embedder.close()
        self.engine = None
        self.embedder = None
        gc.collect()                 # the model, context and adapters are freed with their last reference
        _trim_heap()


M_ARENA_MAX = -8     # glibc's mallopt parameter


def limit_heap_arenas(n: int = 2) -> None:
    """Keep glibc to `n` heap arenas (it makes up to 8 per core, one per thread that allocates).

    Models load, reload and unload on varying threads; with many arenas the memory they free sits
    in whichever arena allocated it, and the server's RSS wanders by megabytes with that history.
    Called once, before the server starts threads.
    """
    if (libc := _glibc()) is not None:
        libc.mallopt(M_ARENA_MAX, n)


def collect_and_trim() -> None:
    """Free unreachable objects now (a crashed base's failed requests leave reference cycles
    through their tracebacks) and hand freed heap pages back to the OS."""
    gc.collect()
    _trim_heap()


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them in its arenas after a model unloads)."""
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, for this module's memory calls; None on another C library (nothing to tune then)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if all(hasattr(libc, f) for f in ("malloc_trim", "mallopt", "madvise")) else None


MADV_PAGEOUT = 21    # Linux 5.4+: reclaim these pages now


def release_code_pages() -> None:
    """Hand back the resident pages of llama.cpp's code (the llamacore extension, read-only
    mappings only) once no model is loaded in this process: loading and decoding page in about
    2.5 MiB of it that nothing runs until the next load, when the kernel reads them in again.
    (An older kernel refuses the advice; nothing changes then.)"""
    path = os.path.realpath(llamacore._core.__file__)
    if (libc := _glibc()) is None:
        return
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:                          # not Linux
        return
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[5] == path and "w" not in fields[1]:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_PAGEOUT)


__all__ = ["Loaded"]
