"""The cyclic garbage collector in the server process: keep its full collections short, and measure them.

A full (generation 2) collection walks every tracked object while it holds the GIL, so every
stream's next token waits for it. A started server holds some 60 thousand such objects (uvicorn,
Starlette, pydantic, msgspec, Jinja2, numpy, prometheus-client, the request schemas); on 2 cores,
with a decode running, a full collection took 20-60 ms, about once every 30 rounds of 16 streamed
requests, and each time every stream in flight waited that long for its next token. Those objects
live as long as the process, so the server moves them out of the collector's sight once it has
started (`gc.freeze`, as the fork server does for its workers): full collections then walk only what
requests and models created since (about 3 thousand objects, under 3 ms, in the same test). Models
load after the freeze, so the collection that frees an unloaded model's reference cycles still
sees them.
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram


def freeze_startup_objects() -> None:
    """Collect what startup left behind, then keep every object alive now out of later collections."""
    gc.collect()
    gc.freeze()


class GcPauses:
    """`llamaserve_gc_pause_seconds` by generation while installed, and the objects frozen at startup."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pauses = Histogram("llamaserve_gc_pause_seconds",
                                "Cyclic garbage collections in the server process, which hold the GIL throughout, "
                                "by generation", ["generation"],
                                buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25), registry=registry)
        for generation in range(len(gc.get_threshold())):   # every series from the start: a fixed set
            self.pauses.labels(str(generation))
        self.frozen = Gauge("llamaserve_gc_frozen_objects",
                            "Objects kept out of garbage collections (those alive when the server started)",
                            registry=registry)
        self.frozen.set_function(gc.get_freeze_count)
        self._started = 0.0

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":           # collections do not nest: one start, then its stop
            self._started = time.perf_counter()
        else:
            self.pauses.labels(str(info["generation"])).observe(time.perf_counter() - self._started)

    def install(self) -> None:
        gc.callbacks.append(self._observe)

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._observe)


__all__ = ["GcPauses", "freeze_startup_objects"]
