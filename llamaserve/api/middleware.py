"""ASGI middleware: request ids, API-key auth (Bearer, x-api-key or a browser's Basic sign-in, constant-time) and
per-route request counting."""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import uuid
from collections.abc import Collection, Mapping, Sequence

from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llamaserve.api.anthropic.protocol import error_body
from llamaserve.api.errors import APIError, error_response
from llamaserve.runtime.logs import request_id
from llamaserve.runtime.metrics import Metrics

OPEN_PATHS = {"/health", "/ready"}      # probes (liveness, readiness) send no key


# what a client's x-request-id may be to be echoed (anything else is replaced by a new id)
_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:/+=-]{1,128}")


class RequestId:
    """Every response carries ``x-request-id``: the request's own, when it sends a sane one, else a new
    one; the server's log lines for the request carry it too (llamaserve.runtime.logs.RequestTag)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"")
        rid = given.decode() if _REQUEST_ID.fullmatch(given) else f"req_{uuid.uuid4().hex}"
        token = request_id.set(rid)

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            request_id.reset(token)


def _basic_password(token: bytes) -> bytes:
    """The password of an `Authorization: Basic` token (the user name is ignored), or b""."""
    try:
        return base64.b64decode(token, validate=True).partition(b":")[2]
    except (binascii.Error, ValueError):
        return b""


def _cross_site(headers: Mapping[bytes, bytes]) -> bool:
    """A browser request another site's page started (Sec-Fetch-Site, else Origin against Host): the
    browser attaches remembered Basic credentials to those too, so they must not count there."""
    site = headers.get(b"sec-fetch-site")
    if site is not None:
        return site not in (b"same-origin", b"none")
    origin = headers.get(b"origin")
    return origin is not None and origin.partition(b"://")[2] != headers.get(b"host", b"")


class APIKeyAuth:
    """Every route but /health and /ready needs the key when one is configured: `Authorization: Bearer
    <key>`, `x-api-key: <key>`, or `Authorization: Basic` with the key as the password. Basic is how a
    browser signs in to the chat page (`pages`, challenged with `WWW-Authenticate: Basic` so the browser
    asks); it then sends the same credentials with the page's own API calls, and with nothing cross-site."""

    def __init__(self, app: ASGIApp, api_key: str | None, pages: Collection[str] = ()) -> None:
        self.app = app
        self.key = api_key.encode() if api_key else None
        self.pages = frozenset(pages)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.key is None or scope["path"] in OPEN_PATHS \
                or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"basic":
            given = b"" if _cross_site(headers) else _basic_password(token.strip())
        else:
            given = token.strip() if scheme.lower() == b"bearer" else headers.get(b"x-api-key", b"")
        if given and hmac.compare_digest(given, self.key):
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.pages:                       # a browser: let it ask for the key
            page = PlainTextResponse("This page needs the server's API key: sign in with any user name and "
                                     "the key as the password.\n", status_code=401,
                                     headers={"WWW-Authenticate": 'Basic realm="llamaserve", charset="UTF-8"'})
            await page(scope, receive, send)
            return
        message = "Incorrect API key provided. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
        if scope["path"].startswith("/v1/messages"):          # Anthropic's clients read Anthropic's shape
            await JSONResponse(error_body(401, message), status_code=401)(scope, receive, send)
            return
        err = APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        await error_response(err)(scope, receive, send)


class RequestMetrics:
    """Counts requests by route template and status.

    The label is the matched route's template (`/admin/models/{alias}/load`), or "unmatched":
    a client sending arbitrary paths must not grow the metric's series without bound.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Sequence[Route]) -> None:
        self.app = app
        self.metrics = metrics
        self.templates: dict[object, str] = {route.endpoint: route.path for route in routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, capture)
        finally:
            route = self.templates.get(scope.get("endpoint"), "unmatched")   # set by the router on a match
            self.metrics.requests.labels(route, str(status)).inc()
