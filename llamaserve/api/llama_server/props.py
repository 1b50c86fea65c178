"""llama-server's GET /props (what the server and its model are), POST /props and GET /slots (refused:
there is nothing to change, and no per-slot monitor)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

import llamaserve
from llamacore import llama_cpp_version
from llamaserve.api.common import acquire, apply_sampling_defaults, shown_path
from llamaserve.api.errors import APIError
from llamaserve.api.llama_server.protocol import NativeCompletionRequest
from llamaserve.api.state import server_state
from llamaserve.config.settings import ModelEntry, ServerConfig
from llamaserve.models.loaded import Loaded


async def props(request: Request) -> Response:
    """The default model's properties (or `?model=`'s), in llama-server's shape; loads the model as a
    request for it would."""
    config: ServerConfig = server_state(request).config
    async with AsyncExitStack() as stack:
        entry, loaded = await acquire(stack, server_state(request).registry, request.query_params.get("model"))
        return JSONResponse(_props(config, entry, loaded, shown_path(request, str(entry.model))))


def _props(config: ServerConfig, entry: ModelEntry, loaded: Loaded, model_path: str) -> dict[str, Any]:
    model = loaded.model
    body = NativeCompletionRequest.model_validate({})
    apply_sampling_defaults(body, entry)           # what a /completion request that sets nothing gets
    if loaded.engine is not None:
        n_ctx, slots = loaded.engine.n_ctx_seq, entry.parallel or config.parallel
    else:                                          # an embedder takes one request at a time
        n_ctx, slots = _embedder_n_ctx(loaded), 1
    return {
        "default_generation_settings": {"params": body.settings(), "n_ctx": n_ctx},
        "total_slots": slots,
        "model_alias": entry.alias,
        "model_path": model_path,
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": False, "endpoint_props": False, "endpoint_metrics": config.metrics,
        "ui": config.web_ui,
        "chat_template": loaded.chat_template(entry) if loaded.engine is not None else "",
        "bos_token": _piece(model, model.token_bos), "eos_token": _piece(model, model.token_eos),
        "build_info": f"llamaserve {llamaserve.__version__}, llama.cpp {llama_cpp_version()}",
        "is_sleeping": False,
    }


def _embedder_n_ctx(loaded: Loaded) -> int:
    info = getattr(loaded.embedder, "info", None)
    if isinstance(info, dict):                   # a worker process's embedder
        return int(info["n_ctx"])
    return int(loaded.embedder.ctx.n_ctx)        # type: ignore[union-attr]


def _piece(model: Any, token: int) -> str:
    return model.token_to_piece(token, special=True).decode("utf-8", "replace") if token >= 0 else ""


async def set_props(request: Request) -> Response:
    raise APIError(501, "changing server properties is not supported (set them in the config file)")


async def slots(request: Request) -> Response:
    raise APIError(501, "this server has no slot monitor: sequences are scheduled per model; see /metrics "
                        "for requests processing and waiting")
