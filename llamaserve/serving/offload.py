"""Work a request asks for beyond moving bytes (rendering, tokenizing, detokenizing, pieces, image
decoding) runs on worker threads, a bounded number at once: the event loop keeps answering every
other client, /health included, while a large prompt is tokenized."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from anyio import CapacityLimiter
from anyio.to_thread import run_sync

T = TypeVar("T")

# at most this many requests' prompt work at once (llama.cpp's tokenizer and chat layer release the GIL)
MAX_CONCURRENT = max(2, os.cpu_count() or 2)
_limiters: dict[int, CapacityLimiter] = {}


def _limiter() -> CapacityLimiter:
    """One limiter per event loop (a limiter belongs to the loop it was first used on)."""
    import asyncio

    key = id(asyncio.get_running_loop())
    if key not in _limiters:
        _limiters.clear()            # a new loop (a test's, a restart): the old one's limiter is done
        _limiters[key] = CapacityLimiter(MAX_CONCURRENT)
    return _limiters[key]


async def off_loop(work: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """work(*args, **kwargs) on a worker thread, waiting for a free one of MAX_CONCURRENT."""
    return await run_sync(partial(work, *args, **kwargs), limiter=_limiter())


__all__ = ["MAX_CONCURRENT", "off_loop"]
