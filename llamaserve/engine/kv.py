"""The KV side of the scheduler's admissions, done by the engine on its context: a slot's earlier
prompt saved to host memory, a saved prompt loaded back, the slot trimmed to what its request
keeps; and idle slots' cells moved to host memory (llamaserve.engine.prompt_cache says why)."""

from __future__ import annotations

from collections.abc import Callable

from llamacore import Context
from llamaserve.engine.plan import Admission
from llamaserve.engine.prompt_cache import PromptCache
from llamaserve.engine.scheduler import Scheduler


def prepare_sequence(ctx: Context, a: Admission, scheduler: Scheduler, cache: PromptCache | None) -> None:
    """Make `a.slot`'s sequence hold what the admission keeps or restores of its prompt (sharing
    `a.source`'s cells comes after the sequence has its adapters: kv_copy requires the same set)."""
    seq = a.slot.seq
    if a.evicted is not None and cache is not None:     # its earlier prompt goes to host memory first
        adapters, tokens = a.evicted
        cache.put(adapters, tokens, ctx.save_sequence_state(seq))
    if a.restore is not None:
        ctx.kv_remove(seq, 0, -1)
        try:
            ctx.load_sequence_state(a.restore.state, seq)
        except ValueError:                  # no room for it now: the prompt is decoded whole
            ctx.kv_remove(seq, 0, -1)
            scheduler.forget_cache(a.slot)
    if not ctx.kv_remove(seq, a.keep, -1):
        ctx.kv_remove(seq, 0, -1)           # removing a whole sequence always works
        if a.source is None:
            scheduler.forget_cache(a.slot)


def stash_idle(ctx: Context, scheduler: Scheduler, cache: PromptCache,
               until: Callable[[], bool] | None = None) -> None:
    """Move idle slots' cells to host memory and free them: when a task starts (as llama-server does),
    and, before that, as soon as the engine has nothing to run, so that the next request does not
    wait for it (8 slots of a 24M model: about 5 ms of its time to first token). `until` stops early
    once there is work again: a request arriving meanwhile waits for one slot's move at most."""
    for slot in scheduler.idle_caches():
        if until is not None and until():
            return
        cache.put(slot.adapters, slot.cached, ctx.save_sequence_state(slot.seq))
        ctx.kv_remove(slot.seq, 0, -1)
        scheduler.forget_cache(slot)
