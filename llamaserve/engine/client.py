"""What serves a loaded base model's generations, as the layers above the engine see it.

An `Engine` runs in a thread of the server; with `isolation: process` a `WorkerEngine`
(llamaserve.worker.client) runs one in a worker process. The registry, the serving pipeline and
the routes use either through this interface only, as vLLM's serving layer uses its EngineClient.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from llamacore import Model
from llamaserve.engine.request import GenRequest


class EngineClient(Protocol):
    @property
    def model(self) -> Model:
        """The model (in a worker's case, a vocabulary-only copy: tokenizer, template, metadata)."""

    @property
    def n_ctx_seq(self) -> int:
        """Tokens one sequence may hold (prompt and answer)."""

    @property
    def capacity(self) -> int:
        """Sequences decoded together."""

    @property
    def adapters(self) -> Mapping[str, Any]:
        """The LoRA adapter files loaded on the base, by path."""

    @property
    def projector(self) -> Any:
        """The vision projector (an object with llamacore.Projector's image methods), or None."""

    @property
    def active(self) -> int: ...

    @property
    def queued(self) -> int: ...

    def start(self) -> EngineClient: ...

    def submit(self, req: GenRequest) -> None:
        """Queue a generation; its events reach `req`'s callback (QueueFullError when the queue is full)."""

    def add_adapter(self, path: str) -> object: ...

    def remove_adapter(self, path: str) -> None: ...

    def speculative_counts(self) -> tuple[int, int] | None:
        """(drafted, accepted) tokens so far, None without speculative decoding."""

    def decode_counts(self) -> tuple[int, int, int]: ...

    def memory_bytes(self) -> int: ...

    def close(self) -> None: ...


__all__ = ["EngineClient"]
