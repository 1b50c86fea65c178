"""Server-sent events for streamed responses."""

from __future__ import annotations

import asyncio
import contextlib
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
    if not await unless_gone(events.ready(), request):
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return None


async def unless_gone(work: Awaitable[Any], request: Request) -> bool:
    """Await `work` (True once it is done; its exception raised), unless the client disconnects first:
    `work` is then cancelled and False returned."""
    done = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait((done, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not done.done():
            done.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await done
    if done.cancelled():
        return False
    done.result()
    return True


async def disconnected(request: Request) -> None:
    """Returns once the client has closed the connection (the body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def sse_response(chunks: AsyncGenerator[Any, None], release: Callable[[], Awaitable[Any]], *,
                 encode: Callable[[Any], str] = event, end: str = "data: [DONE]\n\n",
                 on_error: Callable[[APIError], str] | None = None) -> StreamingResponse:
    """Stream chunks as `data:` lines ending with [DONE]; a failure mid-stream becomes an error event.

    (Another API's stream: `encode` writes a chunk, `end` closes the stream, `on_error` writes the
    error event; Anthropic's Messages stream ends without [DONE].)

    `release` (unpinning the model) runs as soon as the last chunk is made, whether or not the client
    has read the ones before (a task writes them into a queue that the response sends from: a
    client that stops reading holds bytes, not the model), or when the client disconnects; and again
    as the response's background task for a client gone before the body started. Running it twice is
    safe (`AsyncExitStack.aclose` is idempotent).
    """
    frames: asyncio.Queue[tuple[bool, str]] = asyncio.Queue()      # (last, text); bounded by max_tokens

    async def produce() -> None:
        try:
            async for chunk in chunks:
                frames.put_nowait((False, encode(chunk)))
            frames.put_nowait((True, end))
        except Exception as exc:        # mid-stream: an error event in place of the rest
            err = api_error_for(exc)
            frames.put_nowait((True, on_error(err) if on_error is not None else event(err.body()) + end))
        finally:
            await chunks.aclose()
            await release()

    async def body() -> AsyncIterator[str]:
        producer = asyncio.ensure_future(produce())
        try:
            while True:
                last, text = await frames.get()
                yield text
                if last:
                    break
        finally:
            if not producer.done():       # the client left: stop the generation too
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await producer
            await release()
    return StreamingResponse(body(), media_type="text/event-stream", background=BackgroundTask(release),
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
