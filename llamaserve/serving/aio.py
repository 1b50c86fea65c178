"""Async-iterator combinators."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol


class Stream(Protocol):
    """An async iterable that can be closed early (an async generator, a Generation)."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def aclose(self) -> None: ...


async def merge(streams: Sequence[Stream]) -> AsyncIterator[tuple[int, Any]]:
    """Items of several async iterators as they arrive, tagged with the iterator's index."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any, BaseException | None, bool]] = asyncio.Queue()

    async def pump(i: int, stream: Stream) -> None:
        try:
            async for item in stream:
                await queue.put((i, item, None, False))
            await queue.put((i, None, None, True))
        except BaseException as exc:          # forwarded to the consumer, which re-raises it
            await queue.put((i, None, exc, True))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            i, item, exc, done = await queue.get()
            if exc is not None:
                raise exc
            if done:
                remaining -= 1
            else:
                yield i, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for stream in streams:
            await stream.aclose()
