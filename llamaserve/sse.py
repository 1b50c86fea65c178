"""Server-sent events for streamed responses."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

from llamaserve.errors import APIError


def event(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


def sse_response(chunks: AsyncGenerator[Any, None],
                 release: Callable[[], Awaitable[Any]]) -> StreamingResponse:
    """Stream chunks as `data:` lines ending with [DONE]; a failure mid-stream becomes an error event.

    `release` (unpinning the model) runs when the stream ends, fails or the client disconnects:
    from the body's `finally`, and again as the response's background task for a client gone
    before the body started. Running it twice is safe (`AsyncExitStack.aclose` is idempotent).
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
