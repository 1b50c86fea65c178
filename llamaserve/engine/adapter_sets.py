"""Which adapter set each sequence of an engine's context holds (Context.set_sequence_adapters).

A request on the set its slot's sequence already holds sets nothing, and an adapter about to be
freed is first taken off the sequences that still hold it (llama.cpp would keep a dangling pointer).
"""

from __future__ import annotations

from llamacore import Context, LoraAdapter
from llamacore.generation.kv_reuse import AdapterKey
from llamaserve.engine.plan import Admission


class SequenceAdapters:
    """The adapter set given to each sequence of one context. It keeps only the sets' keys: the
    engine owns the context and the adapters, and frees the context when it closes."""

    def __init__(self) -> None:
        self._held: dict[int, AdapterKey] = {}

    def attach(self, ctx: Context, adapters: dict[str, LoraAdapter], a: Admission) -> None:
        """Give `a.slot`'s sequence its request's set (`adapters`: path -> loaded adapter), then the
        cells of the prefix it shares with `a.source` (kv_copy takes them only between sequences of
        one set). Raises, the sequence emptied, when the set cannot be applied; the request fails alone."""
        seq = a.slot.seq
        if self._held.get(seq) != a.req.adapters:
            try:
                ctx.set_sequence_adapters(seq, {adapters[p]: s for p, s in a.req.adapters})
            except Exception:
                ctx.kv_remove(seq, 0, -1)
                raise
            self._held[seq] = a.req.adapters
        if a.source is not None:
            ctx.kv_copy(a.source.seq, seq, 0, a.shared)

    def release(self, ctx: Context, path: str) -> None:
        """Take adapter `path` off every sequence that holds it, before the engine frees it."""
        for seq, key in self._held.items():
            if any(p == path for p, _ in key):
                ctx.set_sequence_adapters(seq, {})
                self._held[seq] = ()
