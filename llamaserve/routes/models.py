"""GET /v1/models, /health, /metrics and the admin routes (load, unload, state)."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamaserve.errors import APIError, UnknownModelError, api_error_for


async def list_models(request: Request) -> Response:
    created = int(time.time())
    data = [{"id": name, "object": "model", "created": created, "owned_by": "llamaserve"}
            for name in request.app.state.registry.names()]
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def prometheus(request: Request) -> Response:
    state = request.app.state
    engines = [m.engine for m in state.registry.loaded.values() if m.engine is not None]
    state.metrics.active_sequences.set(sum(e.active for e in engines))
    state.metrics.queue_depth.set(sum(e.queued for e in engines))
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")


def _entry(request: Request):
    try:
        return request.app.state.registry.entry(request.path_params["alias"])
    except UnknownModelError as exc:
        raise api_error_for(exc, param="alias") from None


async def admin_models(request: Request) -> Response:
    registry = request.app.state.registry
    now = time.monotonic()
    out = []
    for entry in registry.config.models:
        loaded = registry.state(entry)
        item = {"alias": entry.alias, "aliases": list(entry.aliases), "model": str(entry.model),
                "lora_adapters": {str(p): s for p, s in entry.lora_adapters},
                "state": "loaded" if loaded else "unloaded"}
        if loaded:
            item.update({
                "memory_bytes": loaded.memory_bytes(), "load_seconds": round(loaded.load_seconds, 3),
                "idle_seconds": round(now - loaded.last_used, 3), "in_use": loaded.in_use,
                "active_sequences": loaded.engine.active if loaded.engine else 0,
                "queued": loaded.engine.queued if loaded.engine else 0,
                "shared_with": [e.alias for e in loaded.entries if e.alias != entry.alias],
            })
        out.append(item)
    return JSONResponse({"object": "list", "data": out})


async def admin_load(request: Request) -> Response:
    entry = _entry(request)
    loaded = await request.app.state.registry.load(entry)
    return JSONResponse({"alias": entry.alias, "state": "loaded", "load_seconds": round(loaded.load_seconds, 3)})


async def admin_unload(request: Request) -> Response:
    entry = _entry(request)
    registry = request.app.state.registry
    loaded = registry.state(entry)
    if loaded is not None:
        if loaded.busy():
            raise APIError(503, f"model '{entry.alias}' is serving requests",
                           headers={"Retry-After": "1"})
        await registry.unload(loaded, reason="admin")
    return JSONResponse({"alias": entry.alias, "state": "unloaded"})
