"""GET /v1/models and /v1/models/{id}, llama.cpp's /lora-adapters, /health and /metrics."""

from __future__ import annotations

import os
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamaserve.api.common import shown_path
from llamaserve.api.errors import APIError, api_error_for
from llamaserve.api.state import server_state
from llamaserve.config.settings import ModelEntry
from llamaserve.errors import UnknownModelError
from llamaserve.models.registry import Registry


def model_card(registry: Registry, entry: ModelEntry, name: str, created: int) -> dict[str, Any]:
    """An OpenAI model object; adapter-backed aliases also carry `parent` (the base's alias, as vLLM
    lists LoRA models) and their adapters by name. `capabilities` (as Ollama and llama-server list
    them): "completion" or "embedding", and "vision" for a model with a projector."""
    kind = ["embedding"] if entry.load.get("embedding") else ["completion"]
    card: dict[str, Any] = {"id": name, "object": "model", "created": created, "owned_by": "llamaserve",
                            "parent": registry.parent(entry),
                            "capabilities": kind + (["vision"] if entry.clip_model_path else [])}
    if entry.lora_adapters:
        catalog = registry.catalog(entry)
        card["lora_adapters"] = {catalog.by_path(os.fspath(p)).name: s     # type: ignore[union-attr]
                                 for p, s in entry.lora_adapters}
    return card


async def list_models(request: Request) -> Response:
    registry: Registry = server_state(request).registry
    created = int(time.time())
    data = [model_card(registry, e, name, created) for e in registry.entries() for name in e.names()]
    return JSONResponse({"object": "list", "data": data})


async def get_model(request: Request) -> Response:
    registry: Registry = server_state(request).registry
    name = request.path_params["model"]
    try:
        entry = registry.entry(name) if name else None
    except UnknownModelError:
        entry = None
    if entry is None:
        raise APIError(404, f"The model '{name[:200]}' does not exist", param="model", code="model_not_found")
    return JSONResponse(model_card(registry, entry, name, int(time.time())))


async def lora_adapters(request: Request) -> Response:
    """llama.cpp's GET /lora-adapters for the base of `?model=` (default model): [{id, path, scale}].

    `scale` is the scale that alias applies when a request names no adapters (0 for the others);
    ids are what a request's `lora: [{id, scale}]` names.
    """
    registry: Registry = server_state(request).registry
    try:
        entry = registry.entry(request.query_params.get("model"), fallback=True)
    except UnknownModelError as exc:
        raise api_error_for(exc) from None
    defaults = {os.fspath(p): s for p, s in entry.lora_adapters}
    return JSONResponse([{"id": a.id, "path": shown_path(request, a.path), "scale": defaults.get(a.path, 0.0),
                          "name": a.name}
                         for a in registry.catalog(entry).listed()])


async def set_lora_adapters(request: Request) -> Response:
    """llama.cpp's POST /lora-adapters sets server-wide scales; here each request or alias has its own."""
    raise APIError(405, "setting adapter scales for every request is not supported: send them per request "
                        "(\"lora\": [{\"id\": i, \"scale\": s}] or \"lora_adapters\": {\"name\": s}), or add an "
                        "alias with those scales (POST /admin/adapters, or lora_adapters in the config)",
                   headers={"Allow": "GET"})


async def health(request: Request) -> Response:
    """Liveness: the process answers (also while draining)."""
    return JSONResponse({"status": "ok"})


async def ready(request: Request) -> Response:
    """Readiness: 503 once SIGTERM arrived (drain_delay), and with ready_requires_model until the
    default model is loaded; a load balancer sends traffic only while this is 200."""
    state = server_state(request)
    if state.drain.unready:
        return JSONResponse({"status": "draining"}, status_code=503)
    if state.config.ready_requires_model and not state.registry.default_loaded():
        return JSONResponse({"status": "loading"}, status_code=503)
    return JSONResponse({"status": "ready"})


async def prometheus(request: Request) -> Response:
    state = server_state(request)
    if not state.config.metrics:
        raise APIError(501, "metrics are off on this server (metrics: false in its config)")
    engines = [m.engine for m in state.registry.loaded.values() if m.engine is not None]
    state.metrics.active_sequences.set(sum(e.active for e in engines))
    state.metrics.queue_depth.set(sum(e.queued for e in engines))
    for loaded in state.registry.loaded.values():
        counts = loaded.engine.speculative_counts() if loaded.engine is not None else None
        if counts is not None:
            model = loaded.entries[0].alias
            state.metrics.draft_tokens.labels(model).set(counts[0])
            state.metrics.draft_accepted.labels(model).set(counts[1])
    llamacpp = state.metrics.llamacpp.render(engines, processing=sum(e.active for e in engines),
                                             deferred=sum(e.queued for e in engines))
    response = Response(state.metrics.render() + llamacpp.encode(), media_type="text/plain; version=0.0.4")
    # llama-server's header, in its spelling (Starlette lowercases the names it is given; some clients compare exactly)
    response.raw_headers.append((b"Process-Start-Time-Unix", str(state.metrics.llamacpp.started).encode()))
    return response
