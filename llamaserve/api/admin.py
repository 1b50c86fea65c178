"""Admin routes: models (state, load, unload) and runtime adapters, plus vLLM's adapter routes.

Every route here needs the API key when one is set (like every route but /health). Runtime
adapters are refused unless the config names an `adapters_dir`, and a path must resolve inside
one (llamaserve.lora.catalog.find_adapter_file).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from llamaserve.api.common import parse_body
from llamaserve.api.errors import APIError, api_error_for
from llamaserve.api.openai.protocol import AddAdapterRequest, LoadLoraAdapterRequest, UnloadLoraAdapterRequest
from llamaserve.api.state import server_state
from llamaserve.config.settings import ModelEntry
from llamaserve.errors import NameConflictError, UnknownModelError
from llamaserve.lora.catalog import Adapter
from llamaserve.models.crashes import CrashRecord
from llamaserve.models.factory import isolation
from llamaserve.models.registry import Registry
from llamaserve.models.runtime_adapters import RuntimeAlias

# -- models ----------------------------------------------------------------------------------


def _entry(request: Request) -> ModelEntry:
    try:
        return server_state(request).registry.entry(request.path_params["alias"])
    except UnknownModelError as exc:
        raise api_error_for(exc, param="alias") from None


async def admin_models(request: Request) -> Response:
    registry: Registry = server_state(request).registry
    now = time.monotonic()
    out = []
    for entry in registry.entries():
        loaded = registry.state(entry)
        record = registry.crashes.get(entry.base_key())
        retry_after = record.retry_after() if record is not None else None
        item: dict[str, Any] = {"alias": entry.alias, "aliases": list(entry.aliases), "model": str(entry.model),
                                "lora_adapters": {str(p): s for p, s in entry.lora_adapters},
                                "runtime": entry.alias in registry.runtime.aliases,
                                "state": "loaded" if loaded else "failed" if retry_after else "unloaded",
                                "isolation": isolation(entry),
                                **(record.as_dict() if record is not None else CrashRecord().as_dict())}
        if retry_after:
            item["retry_after"] = round(retry_after, 3)
        worker = loaded.worker if loaded else None
        if worker is not None:
            item["worker"] = {"pid": worker.pid, "rss_bytes": worker.rss}
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
    loaded = await server_state(request).registry.load(entry)
    return JSONResponse({"alias": entry.alias, "state": "loaded", "load_seconds": round(loaded.load_seconds, 3)})


async def admin_unload(request: Request) -> Response:
    entry = _entry(request)
    registry = server_state(request).registry
    loaded = registry.state(entry)
    if loaded is not None:
        if loaded.busy():
            raise APIError(503, f"model '{entry.alias}' is serving requests",
                           headers={"Retry-After": "1"})
        await registry.unload(loaded, reason="admin")
    return JSONResponse({"alias": entry.alias, "state": "unloaded"})


# -- adapters --------------------------------------------------------------------------------


def _adapter_state(registry: Registry, key: tuple, adapter: Adapter, draining: bool) -> dict[str, Any]:
    loaded = registry.loaded.get(key)
    users = [e.alias for e in registry.entries()
             if e.base_key() == key and any(str(p) == adapter.path for p, _ in e.lora_adapters)]
    return {
        "id": adapter.id, "name": adapter.name, "names": list(adapter.names), "path": adapter.path,
        "source": "config" if adapter.configured else "runtime", "aliases": users,
        "state": "draining" if draining else "loaded" if loaded is not None and loaded.engine is not None
        and adapter.path in loaded.engine.adapters else "unloaded",
        "load_seconds": None if adapter.load_seconds is None else round(adapter.load_seconds, 4),
        "loaded_at": adapter.loaded_at, "error": adapter.error, "memory_bytes": adapter.size,
        "requests": adapter.requests, "prompt_tokens": adapter.prompt_tokens,
        "completion_tokens": adapter.completion_tokens, "running_requests": adapter.pins,
    }


async def list_adapters(request: Request) -> Response:
    """Adapters per base model: each one's names, source, load time, requests served and memory."""
    registry: Registry = server_state(request).registry
    data = []
    for key, entries in registry.bases.items():
        if entries[0].load.get("embedding"):
            continue
        catalog = registry.catalogs[key]
        adapters = [_adapter_state(registry, key, a, False) for a in catalog.listed()]
        adapters += [_adapter_state(registry, key, a, True) for a in sorted(catalog.draining, key=lambda a: a.id)]
        data.append({"base": registry.base_alias(key), "model": str(entries[0].model),
                     "state": "loaded" if key in registry.loaded else "unloaded", "adapters": adapters})
    runtime = [_runtime_state(rt) for rt in registry.runtime.aliases.values()]
    return JSONResponse({"object": "list", "data": data, "runtime_aliases": runtime})


def _runtime_state(rt: RuntimeAlias) -> dict[str, Any]:
    return {"alias": rt.entry.alias, "base": rt.base, "path": rt.found.relative,
            "adapters_dir": str(rt.found.folder), "scale": rt.scale, "adapter_id": rt.adapter.id,
            "added_at": rt.added_at}


async def _add(registry: Registry, alias: str, base: str | None, path: str,
               scale: float) -> tuple[RuntimeAlias, float]:
    if base is None:
        default = registry.config.default_entry()
        if default is None:
            raise APIError(400, "base: no default model; name the base model", param="base")
        base = default.alias
    try:
        return await registry.runtime.add(alias, base, path, scale)
    except UnknownModelError as exc:
        raise api_error_for(exc, param="base") from None
    except (ValueError, OSError, NameConflictError) as exc:     # path, file and name problems
        raise api_error_for(exc) from None


async def add_adapter(request: Request) -> Response:
    """POST /admin/adapters {path, alias, base?, scale?}: load the file onto the base, serve it as alias."""
    body = await parse_body(request, AddAdapterRequest)
    rt, seconds = await _add(server_state(request).registry, body.alias, body.base, body.path, body.scale)
    return JSONResponse({"object": "adapter", **_runtime_state(rt), "load_seconds": round(seconds, 4)})


def _remove(registry: Registry, alias: str) -> RuntimeAlias:
    try:
        return registry.runtime.remove(alias)
    except (UnknownModelError, ValueError) as exc:
        raise api_error_for(exc, param="alias") from None


async def remove_adapter(request: Request) -> Response:
    """DELETE /admin/adapters/{alias}: the alias goes now; its file when its last request ends."""
    registry: Registry = server_state(request).registry
    rt = _remove(registry, request.path_params["alias"])
    return JSONResponse({"object": "adapter", "alias": rt.entry.alias, "deleted": True,
                         "draining": rt.adapter in registry.catalog(rt.entry).draining})


async def vllm_load(request: Request) -> Response:
    """vLLM's POST /v1/load_lora_adapter: 200 with a short text body, as vLLM answers."""
    body = await parse_body(request, LoadLoraAdapterRequest)
    await _add(server_state(request).registry, body.lora_name, body.base_model_name, body.lora_path, 1.0)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")


async def vllm_unload(request: Request) -> Response:
    """vLLM's POST /v1/unload_lora_adapter."""
    body = await parse_body(request, UnloadLoraAdapterRequest)
    _remove(server_state(request).registry, body.lora_name)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")
