"""The Starlette application and `serve()`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llamacore import set_grammar_work_limit
from llamaserve.api.admin import (
    add_adapter,
    admin_load,
    admin_models,
    admin_unload,
    list_adapters,
    remove_adapter,
    vllm_load,
    vllm_unload,
)
from llamaserve.api.anthropic.routes import count_tokens, messages
from llamaserve.api.common import is_admin
from llamaserve.api.errors import KNOWN_ERRORS, APIError, api_error_for, error_response, for_client
from llamaserve.api.llama_server.completion import llama_completion
from llamaserve.api.llama_server.props import props, set_props, slots
from llamaserve.api.llama_server.utility import apply_template, detokenize, tokenize
from llamaserve.api.middleware import (
    LOOPBACK_NAMES,
    APIKeyAuth,
    OpenServerGuard,
    RequestId,
    RequestMetrics,
    SendTimeout,
)
from llamaserve.api.openai.chat import chat_completions, chat_input_tokens
from llamaserve.api.openai.completions import completions
from llamaserve.api.openai.embeddings import embeddings, native_embeddings
from llamaserve.api.openai.models import (
    get_model,
    health,
    list_models,
    lora_adapters,
    prometheus,
    ready,
    set_lora_adapters,
)
from llamaserve.api.openapi import openapi_schema
from llamaserve.api.responses.routes import create_response, delete_response, get_response
from llamaserve.api.responses.store import ResponseStore
from llamaserve.api.shutdown import Drain, DrainMiddleware
from llamaserve.api.state import ServerState
from llamaserve.api.web_ui import chat_page
from llamaserve.config.settings import ServerConfig
from llamaserve.models.registry import Registry
from llamaserve.runtime.gc_pauses import freeze_startup_objects
from llamaserve.runtime.logs import configure as configure_logging
from llamaserve.runtime.memory import limit_heap_arenas
from llamaserve.runtime.metrics import Metrics
from llamaserve.serving.structured import grammar_cache

log = logging.getLogger(__name__)


async def _api_error(request: Request, exc: Exception) -> Response:
    return error_response(for_client(api_error_for(exc), is_admin(request)))


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return error_response(APIError(exc.status_code, exc.detail or "error"))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s", request.url.path)
    return error_response(APIError(500, f"internal error: {type(exc).__name__}"))


async def _openapi(request: Request) -> Response:
    return JSONResponse(openapi_schema())


def _unversioned(routes: list[Route]) -> list[Route]:
    """The OpenAI routes again without their /v1 prefix, as llama-server serves them (/chat/completions...)."""
    taken = {r.path for r in routes}
    return [Route(r.path.removeprefix("/v1"), r.endpoint, methods=list(r.methods or ()))
            for r in routes if r.path.startswith("/v1/") and r.path.removeprefix("/v1") not in taken]


def create_app(config: ServerConfig) -> Starlette:
    # one grammar operation's work, here and in worker processes (they read it at import)
    os.environ["LLAMACORE_GRAMMAR_WORK_LIMIT"] = str(config.grammar_work_limit)
    set_grammar_work_limit(config.grammar_work_limit)
    metrics = Metrics()
    registry = Registry(config, metrics)
    drain = Drain()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        freeze_startup_objects()         # before any model loads: unloading must still collect its cycles
        metrics.gc.install()
        registry.start()
        if config.ready_requires_model:
            registry.preload_default()
        try:
            yield
        finally:
            await registry.close()
            metrics.gc.remove()

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/chat/completions/input_tokens", chat_input_tokens, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/lora-adapters", lora_adapters, methods=["GET"]),
        Route("/lora-adapters", set_lora_adapters, methods=["POST"]),
        Route("/v1/load_lora_adapter", vllm_load, methods=["POST"]),
        Route("/v1/unload_lora_adapter", vllm_unload, methods=["POST"]),
        Route("/completion", llama_completion, methods=["POST"]),
        Route("/completions", llama_completion, methods=["POST"]),     # llama-server's: native, not OpenAI's
        Route("/embedding", native_embeddings, methods=["POST"]),
        Route("/embeddings", native_embeddings, methods=["POST"]),
        Route("/props", props, methods=["GET"]),
        Route("/props", set_props, methods=["POST"]),
        Route("/slots", slots, methods=["GET"]),
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/apply-template", apply_template, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
        Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
        Route("/openapi.json", _openapi, methods=["GET"]),
        Route("/admin/models", admin_models, methods=["GET"]),
        Route("/admin/models/{alias}/load", admin_load, methods=["POST"]),
        Route("/admin/models/{alias}/unload", admin_unload, methods=["POST"]),
        Route("/admin/adapters", list_adapters, methods=["GET"]),
        Route("/admin/adapters", add_adapter, methods=["POST"]),
        Route("/admin/adapters/{alias:path}", remove_adapter, methods=["DELETE"]),
    ]
    if config.web_ui:
        routes.append(Route("/", chat_page, methods=["GET"]))
    routes += _unversioned(routes)
    middleware = [Middleware(SendTimeout, seconds=config.send_timeout), Middleware(RequestId),
                  Middleware(RequestMetrics, metrics=metrics, routes=routes),
                  Middleware(DrainMiddleware, drain=drain)]
    if config.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                                     allow_methods=["GET", "POST", "DELETE", "OPTIONS"], allow_headers=["*"],
                                     allow_credentials=config.cors_credentials))
    if config.api_key is None:
        middleware.append(Middleware(OpenServerGuard, allowed_hosts=allowed_hosts(config),
                                     cors_origins=config.cors_origins))
    middleware.append(Middleware(APIKeyAuth, api_key=config.api_key, pages=("/",) if config.web_ui else (),
                                 admin_key=config.admin_key))
    handlers: dict[Any, Callable[[Request, Any], Awaitable[Response]]] = {
        APIError: _api_error, **{cls: _api_error for cls in KNOWN_ERRORS},
        HTTPException: _http_error, Exception: _unexpected}
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan, exception_handlers=handlers)
    app.state.server = ServerState(config, registry, metrics, drain, grammar_cache(config, metrics),
                                   ResponseStore(config.responses_store_size, config.responses_store_bytes))
    return app


# After the grace, requests cut off by Drain end within moments; this bounds how long uvicorn waits for that.
_CUT_MARGIN = 5.0


class _Server(uvicorn.Server):
    """Graceful SIGTERM: stop accepting, give in-flight requests `grace` seconds, end the rest clearly
    (see llamaserve.api.shutdown), unload the models, and exit 0 instead of re-raising the signal."""

    def __init__(self, config: uvicorn.Config, drain: Drain, grace: float, delay: float = 0.0) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace = grace
        self.delay = delay
        self._deadline: float | None = None

    def handle_exit(self, sig: int, frame) -> None:
        if sig == signal.SIGTERM and self.delay > 0 and not self.drain.unready:
            # first /ready says 503 (a load balancer stops sending), then connections close
            self.drain.unready = True
            self._deadline = time.monotonic() + self.delay
            log.info("SIGTERM: not ready; serving on for drain_delay %.1fs, then shutting down", self.delay)
            return
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM and sig in self._captured_signals:
            self._captured_signals.remove(sig)

    async def on_tick(self, counter: int) -> bool:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._deadline = None
            self.handle_exit(signal.SIGTERM, None)
        return await super().on_tick(counter)

    async def shutdown(self, sockets=None) -> None:
        self.drain.begin()
        cutter = asyncio.get_running_loop().create_task(self.drain.cut_after(self.grace))
        try:
            await super().shutdown(sockets)
        finally:
            cutter.cancel()


def allowed_hosts(config: ServerConfig) -> tuple[str, ...]:
    """The Host names a server without an api_key answers to: `allowed_hosts`, else the loopback names and
    the address it listens on (unless that is every address)."""
    if config.allowed_hosts is not None:
        return config.allowed_hosts
    own = () if config.host in ("0.0.0.0", "::", "") else (config.host,)
    return (*LOOPBACK_NAMES, *own)


def serve(config: ServerConfig) -> None:
    """Run the server until SIGINT/SIGTERM; in-flight requests get `shutdown_grace` seconds."""
    configure_logging(config.log_level)
    limit_heap_arenas()
    app = create_app(config)
    # h11 whatever else is installed: httptools would send header names lower-cased, and clients that
    # read headers case-sensitively (llama.cpp's server tests) look for `Process-Start-Time-Unix`
    uvicorn_config = uvicorn.Config(app, host=config.host, port=config.port, log_level=config.log_level.lower(),
                                    http="h11",
                                    timeout_graceful_shutdown=math.ceil(config.shutdown_grace + _CUT_MARGIN))
    _Server(uvicorn_config, app.state.server.drain, config.shutdown_grace, config.drain_delay).run(
        sockets=listening_sockets(config.host, config.port))


def listening_sockets(host: str, port: int) -> list[socket.socket] | None:
    """llama-server's comma-separated host ("127.0.0.1,::1"): one socket bound to each address; None
    for a single address (uvicorn binds it)."""
    hosts = [h.strip().removeprefix("[").removesuffix("]") for h in host.split(",") if h.strip()]
    if len(hosts) < 2:
        return None
    sockets = []
    for name in hosts:
        family, kind, proto, _, address = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:        # "::" beside "0.0.0.0" must not claim the IPv4 port too
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sockets.append(sock)
    return sockets
