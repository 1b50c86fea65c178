"""A loaded base model: what serves it (an engine, or an embedder) and the aliases it serves."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from llamacore import Llama, Model
from llamacore.chat.templates import resolve_template
from llamaserve.config.settings import ModelEntry
from llamaserve.engine.client import EngineClient
from llamaserve.runtime.memory import collect_and_trim
from llamaserve.worker.client import WorkerEmbedder
from llamaserve.worker.process import WorkerProcess


@dataclass(eq=False)
class Loaded:
    """A loaded base model and the aliases it serves."""

    key: tuple
    entries: list[ModelEntry]
    engine: EngineClient | None = None      # generation models (an Engine, or a worker process's)
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
        collect_and_trim()

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
        collect_and_trim()           # the model, context and adapters are freed with their last reference


__all__ = ["Loaded"]
