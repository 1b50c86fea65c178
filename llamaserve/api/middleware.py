"""ASGI middleware: request ids, API-key auth (Bearer, x-api-key or a browser's Basic sign-in, constant-time;
an admin key for the admin routes), what keeps web pages out of a server without a key, and per-route
request counting."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
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

log = logging.getLogger(__name__)

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


def is_admin_route(method: str, path: str) -> bool:
    """The routes that change what the server holds for everyone: loading and unloading models and
    adapters, global adapter scales and props."""
    return (path.startswith("/admin/") or path.removeprefix("/v1") in ("/load_lora_adapter", "/unload_lora_adapter")
            or (method == "POST" and path in ("/lora-adapters", "/props")))


class APIKeyAuth:
    """Every route but /health and /ready needs the key when one is configured: `Authorization: Bearer
    <key>`, `x-api-key: <key>`, or `Authorization: Basic` with the key as the password. Basic is how a
    browser signs in to the chat page (`pages`, challenged with `WWW-Authenticate: Basic` so the browser
    asks); it then sends the same credentials with the page's own API calls, and with nothing cross-site.

    With an `admin_key` the admin routes (is_admin_route) take that key alone, and the others either
    key; without an `api_key` the others are open."""

    def __init__(self, app: ASGIApp, api_key: str | None, pages: Collection[str] = (),
                 admin_key: str | None = None) -> None:
        self.app = app
        self.key = api_key.encode() if api_key else None
        self.admin_key = admin_key.encode() if admin_key else None
        self.pages = frozenset(pages)

    def _keys(self, scope: Scope) -> tuple[bytes, ...]:
        """The keys that open this request's route; none: it is open."""
        if self.admin_key is None:
            return (self.key,) if self.key else ()
        if is_admin_route(scope["method"], scope["path"]):
            return (self.admin_key,)
        return (self.key, self.admin_key) if self.key else ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # who may see the server's own paths: everyone without an admin key, else that key's holder
            scope.setdefault("state", {})["admin"] = self.admin_key is None
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        keys = self._keys(scope)
        if not keys:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"basic":
            given = b"" if _cross_site(headers) else _basic_password(token.strip())
        else:
            given = token.strip() if scheme.lower() == b"bearer" else headers.get(b"x-api-key", b"")
        # every key is compared, so the time taken says nothing about which one matched
        matched = [hmac.compare_digest(given, key) for key in keys] if given else []
        if any(matched):
            if self.admin_key is not None:
                scope["state"]["admin"] = matched[keys.index(self.admin_key)]
            await self.app(scope, receive, send)
            return
        if scope["path"] in self.pages:                       # a browser: let it ask for the key
            page = PlainTextResponse("This page needs the server's API key: sign in with any user name and "
                                     "the key as the password.\n", status_code=401,
                                     headers={"WWW-Authenticate": 'Basic realm="llamaserve", charset="UTF-8"'})
            await page(scope, receive, send)
            return
        message = "Incorrect API key provided. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
        if keys == (self.admin_key,):
            message = "This route needs the admin key (admin_key). Send it as 'Authorization: Bearer <key>'."
        if scope["path"].startswith("/v1/messages"):          # Anthropic's clients read Anthropic's shape
            await JSONResponse(error_body(401, message), status_code=401)(scope, receive, send)
            return
        err = APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        await error_response(err)(scope, receive, send)


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
SAFE_METHODS = (b"GET", b"HEAD", b"OPTIONS")


def host_name(host: bytes) -> str:
    """The name of a Host header, without its port ("[::1]:8000" -> "::1")."""
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else text
    return text.rpartition(":")[0] if text.count(":") == 1 else text


class OpenServerGuard:
    """What keeps web pages out of a server that has no api_key (its inference routes are open):

    - a request whose Host is not one the server answers to (`allowed_hosts`; by default the loopback
      names and its own `host`) is refused: a DNS-rebinding page would send its own name;
    - a request that changes something (not GET, HEAD or OPTIONS) started by another site's page
      (Sec-Fetch-Site, or an Origin that is not this host) is refused unless its Origin is in `cors`.
    /health and /ready stay open (probes send the pod's address)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Collection[str], cors_origins: Collection[str] = ()) -> None:
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.hosts = frozenset(h.lower().strip("[]") for h in allowed_hosts)
        self.origins = frozenset(o.encode() for o in cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        problem = None
        if not self.any_host and host_name(headers.get(b"host", b"")) not in self.hosts:
            problem = ("this server has no api_key and answers only to the hosts in allowed_hosts; "
                       "add this one there, or set an api_key")
        elif scope["method"].encode() not in SAFE_METHODS and _cross_site(headers) \
                and headers.get(b"origin") not in self.origins and b"*" not in self.origins:
            problem = ("a request from another site's page: this server has no api_key, so only pages it "
                       "serves (or origins listed in cors) may send it requests")
        if problem is None:
            await self.app(scope, receive, send)
            return
        await error_response(APIError(403, problem, code="forbidden"))(scope, receive, send)


class _ClientStalled(Exception):
    """A send made no progress within the send timeout."""


class SendTimeout:
    """Drops a connection whose client has read nothing for `seconds`: a send that cannot complete (the
    client's window is full) holds the response's memory and, before the answer was all made, its turn.
    The connection is closed without the rest of the response."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.seconds:
            await self.app(scope, receive, send)
            return

        async def timed(message: Message) -> None:
            try:
                await asyncio.wait_for(send(message), self.seconds)
            except TimeoutError:
                raise _ClientStalled from None
        try:
            await self.app(scope, receive, timed)
        except _ClientStalled:
            log.warning("%s %s: the client read nothing for %g s (send_timeout); its connection is dropped",
                        scope["method"], scope["path"], self.seconds)
        except BaseExceptionGroup as group:      # from inside a response's task group
            if not group.subgroup(_ClientStalled) or group.subgroup(lambda e: not isinstance(e, _ClientStalled)):
                raise
            log.warning("%s %s: the client read nothing for %g s (send_timeout); its connection is dropped",
                        scope["method"], scope["path"], self.seconds)


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
