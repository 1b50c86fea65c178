"""A generation request and what the engine's executor hands back for it: the job the scheduler
places in a slot (`GenRequest`), a sampled token (`Sampled`) and the events a step emits
(`Emitted`). Shared by the scheduler, the engine and the worker processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llamacore.generation.events import EngineEvent
from llamacore.generation.kv_reuse import AdapterKey

if TYPE_CHECKING:
    from llamacore import ImageChunk
    from llamacore.generation.logprobs import TokenLogprob
    from llamacore.generation.sampling import SamplingParams


@dataclass(eq=False)
class GenRequest:
    """A generation job; the engine reports its events through `emit` from its own thread."""

    tokens: list[int]
    sampling: SamplingParams
    max_tokens: int
    adapters: AdapterKey
    emit: Callable[[EngineEvent], None]
    n_logprobs: int | None = None
    ignore_eos: bool = False
    progress: bool = False          # report each decoded batch of the prompt (Progress events)
    cancelled: bool = False
    on_cancel: Callable[[], None] | None = None      # tells a worker process (llamaserve.worker.client)
    images: dict[int, ImageChunk] = field(default_factory=dict)   # prompt index -> image (llamacore.vision.prompt)

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            if self.on_cancel is not None:
                self.on_cancel()


@dataclass(frozen=True)
class Sampled:
    """What the executor sampled for one row of `StepPlan.sample`."""

    token: int
    eog: bool                          # an end-of-generation token of the model
    logprob: TokenLogprob | None = None


Emitted = list[tuple[GenRequest, EngineEvent]]
