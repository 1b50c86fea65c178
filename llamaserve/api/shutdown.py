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
import contextlib
import logging
from collections.abc import Iterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llamaserve.api.errors import APIError, error_response
from llamaserve.api.sse import event

log = logging.getLogger(__name__)

SHUTDOWN_MESSAGE = "server is shutting down"


def shutdown_error() -> APIError:
    return APIError(503, SHUTDOWN_MESSAGE, code="shutdown", headers={"Retry-After": "5", "Connection": "close"})


class Drain:
    """The requests in flight, and whether the server is draining (SIGTERM) or cutting them off."""

    def __init__(self) -> None:
        self.draining = False       # connections are closing: new requests get 503
        self.unready = False        # SIGTERM arrived: /ready says so, requests are still served (drain_delay)
        self._tasks: set[asyncio.Task] = set()
        self._cut: set[asyncio.Task] = set()

    def begin(self) -> None:
        self.unready = self.draining = True

    @contextlib.contextmanager
    def track(self, task: asyncio.Task) -> Iterator[None]:
        """Count `task` as in flight while the block runs."""
        self._tasks.add(task)
        try:
            yield
        finally:
            self._tasks.discard(task)
            self._cut.discard(task)

    def was_cut(self, task: asyncio.Task) -> bool:
        """Whether `task` was cancelled by `cut()` (rather than by its client or the server)."""
        return task in self._cut

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
            await error_response(shutdown_error())(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None
        started = stream = done = False

        async def tracked(message: Message) -> None:
            nonlocal started, stream, done
            if message["type"] == "http.response.start":
                started = True
                stream = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                             for k, v in message.get("headers", []))
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                done = True
            await send(message)

        with self.drain.track(task):
            try:
                await self.app(scope, receive, tracked)
            except asyncio.CancelledError:
                if not self.drain.was_cut(task):
                    raise
                while task.cancelling():
                    task.uncancel()
                if done:
                    return
                if not started:
                    await error_response(shutdown_error())(scope, receive, send)
                elif stream:
                    body = (event(shutdown_error().body()) + "data: [DONE]\n\n").encode()
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                else:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
