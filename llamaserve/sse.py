"""Server-sent events for streamed responses, and merging several generations into one stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

from llamaserve.errors import APIError


def event(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


def sse_response(chunks: AsyncIterator[dict[str, Any]],
                 release: Callable[[], Awaitable[Any]]) -> StreamingResponse:
    """Stream chunks as `data:` lines ending with [DONE]; a failure mid-stream becomes an error event.

    `release` (unpinning the model) runs when the stream ends, fails or the client disconnects.
    """
    async def body() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield event(chunk)
            yield "data: [DONE]\n\n"
        except APIError as exc:
            yield event(exc.body())
            yield "data: [DONE]\n\n"
        finally:
            await chunks.aclose()
            await release()
    return StreamingResponse(body(), media_type="text/event-stream", background=BackgroundTask(release),
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def merge(streams: list[AsyncIterator[Any]]) -> AsyncIterator[tuple[int, Any]]:
    """Items of several async iterators as they arrive, tagged with the iterator's index."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any, BaseException | None, bool]] = asyncio.Queue()

    async def pump(i: int, stream: AsyncIterator[Any]) -> None:
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
