"""Graceful shutdown: after SIGTERM, in-flight requests get `shutdown_grace` seconds, then a clear ending.

uvicorn stops accepting connections at once and waits for open ones. When the grace runs out,
`Drain.cut()` cancels every request still running. The middleware turns that cancellation into
an honest answer instead of a silently truncated one: a stream that has started ends with an
OpenAI-shaped error event and `data: [DONE]` (so clients raise rather than keep half an answer),
a request that has not answered yet gets 503 with Retry-After. Cancelling the request also
cancels its generation, which frees the engine's sequence; the models unload in the lifespan's
shutdown afterwards. A request that arrives on a kept-alive connection after SIGTERM gets 503.
"""

from __future__ import annotations

import asyncio
import json
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llamaserve.errors import APIError

log = logging.getLogger("llamaserve.shutdown")

SHUTDOWN_MESSAGE = "server is shutting down"


def shutdown_error() -> APIError:
    return APIError(503, SHUTDOWN_MESSAGE, code="shutdown", headers={"Retry-After": "5", "Connection": "close"})


class Drain:
    """The requests in flight, and whether the server is draining (SIGTERM) or cutting them off."""

    def __init__(self) -> None:
        self.draining = False
        self._tasks: set[asyncio.Task] = set()
        self._cut: set[asyncio.Task] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def begin(self) -> None:
        self.draining = True

    def cut(self) -> int:
        """Cancel every request still running; each ends with the shutdown answer. Returns how many."""
        for task in self._tasks - self._cut:
            self._cut.add(task)
            task.cancel(SHUTDOWN_MESSAGE)
        return len(self._cut)

    async def cut_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if self._tasks:
            log.warning("shutdown grace of %ss is over: ending %d request(s)", seconds, self.cut())


class DrainMiddleware:
    """Tracks each HTTP request for `Drain` and answers for it when the drain cuts it off."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            await _send_error(send, shutdown_error())
            return
        task = asyncio.current_task()
        sent = {"started": False, "stream": False, "done": False}

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["started"] = True
                sent["stream"] = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                                     for k, v in message.get("headers", []))
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                sent["done"] = True
            await send(message)

        self.drain._tasks.add(task)
        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if task not in self.drain._cut:
                raise
            while task.cancelling():
                task.uncancel()
            await _finish_cut(send, sent)
        finally:
            self.drain._tasks.discard(task)
            self.drain._cut.discard(task)


async def _finish_cut(send: Send, sent: dict[str, bool]) -> None:
    if sent["done"]:
        return
    if not sent["started"]:
        await _send_error(send, shutdown_error())
    elif sent["stream"]:
        body = f"data: {json.dumps(shutdown_error().body())}\n\ndata: [DONE]\n\n".encode()
        await send({"type": "http.response.body", "body": body, "more_body": False})
    else:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _send_error(send: Send, err: APIError) -> None:
    body = json.dumps(err.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (err.headers or {}).items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
