"""Server-sent events for streamed responses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from llamaserve.api.errors import APIError, api_error_for
from llamaserve.serving.choices import ChoiceEvents

_JSON = msgspec.json.Encoder()


def event(data: Any) -> str:
    """One `data:` frame of compact JSON (UTF-8 as is; msgspec: a streamed token's frame is encoded
    in about a fifth of json.dumps's time)."""
    return f"data: {_JSON.encode(data).decode()}\n\n"


def named_event(kind: str, data: Any) -> str:
    """One event with an `event:` line naming its type, then its `data:` frame (Anthropic's and the
    Responses API's streams)."""
    return f"event: {kind}\n{event(data)}"


# the status logged for a client that left before its streamed response started (nginx's)
CLIENT_CLOSED_REQUEST = 499


async def first_event(events: ChoiceEvents[Any], request: Request) -> Response | None:
    """Wait for a request's first event before its streamed response starts (as llama-server does):
    the response's headers then do not wake the client while the prompt is evaluated on the same
    CPUs, and a failure before any output is an HTTP error (raised here) instead of an error event.

    Returns None when the stream may start, or the response to log for a client that left meanwhile
    (its work is cancelled when the caller closes the request's stack).
    """
    ready = asyncio.ensure_future(events.ready())
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((ready, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not ready.done():
            ready.cancel()
    if ready.cancelled():
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    ready.result()
    return None


async def _disconnected(request: Request) -> None:
    """Returns once the client has closed the connection (the body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def sse_response(chunks: AsyncGenerator[Any, None], release: Callable[[], Awaitable[Any]], *,
                 encode: Callable[[Any], str] = event, end: str = "data: [DONE]\n\n",
                 on_error: Callable[[APIError], str] | None = None) -> StreamingResponse:
    """Stream chunks as `data:` lines ending with [DONE]; a failure mid-stream becomes an error event.

    (Another API's stream: `encode` writes a chunk, `end` closes the stream, `on_error` writes the
    error event; Anthropic's Messages stream ends without [DONE].)

    `release` (unpinning the model) runs when the stream ends, fails or the client disconnects:
    from the body's `finally`, and again as the response's background task for a client gone
    before the body started. Running it twice is safe (`AsyncExitStack.aclose` is idempotent).
    """
    async def body() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield encode(chunk)
            yield end
        except Exception as exc:        # mid-stream: an error event in place of the rest
            err = api_error_for(exc)
            yield on_error(err) if on_error is not None else event(err.body()) + end
        finally:
            await chunks.aclose()
            await release()
    return StreamingResponse(body(), media_type="text/event-stream", background=BackgroundTask(release),
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
