"""Reading a request: JSON body into a schema, model lookup, shared validation -> APIError."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from llamaserve.engine import AdapterKey
from llamaserve.errors import APIError
from llamaserve.registry import CapacityError, Loaded, ModelLoadError, Registry, UnknownModelError

T = TypeVar("T", bound=BaseModel)


async def parse_body(request: Request, schema: type[T]) -> T:
    limit = request.app.state.config.max_body_bytes
    if int(request.headers.get("content-length") or 0) > limit:
        raise APIError(413, f"request body is larger than {limit} bytes")
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > limit:
            raise APIError(413, f"request body is larger than {limit} bytes")
    try:
        data = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:      # ~1000 nested [ or {: json's decoder recurses
        raise APIError(400, "request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise APIError(400, f"{param}: {first['msg']}" if param else first["msg"], param=param) from None


async def acquire(stack: AsyncExitStack, registry: Registry, name: str | None):
    """(entry, loaded base) for a request, pinned until `stack` closes."""
    try:
        entry = registry.entry(name)
    except UnknownModelError as exc:
        raise APIError(404, str(exc), param="model", code="model_not_found") from None
    try:
        loaded: Loaded = await stack.enter_async_context(registry.use(entry))
    except ModelLoadError as exc:
        raise APIError(500, str(exc), code="model_load_failed") from None
    except CapacityError as exc:
        raise APIError(503, str(exc), headers={"Retry-After": "2"}) from None
    return entry, loaded


async def acquire_engine(stack: AsyncExitStack, registry: Registry, name: str | None):
    """(entry, loaded base) of a generation model, pinned until `stack` closes."""
    entry, loaded = await acquire(stack, registry, name)
    if loaded.engine is None:
        raise APIError(400, f"model '{entry.alias}' is an embedding model; use /v1/embeddings", param="model")
    return entry, loaded


def adapter_key(entry) -> AdapterKey:
    return tuple(sorted((str(p), float(s)) for p, s in entry.lora_adapters if s != 0.0))


def check_prompt_fits(n_tokens: int, n_ctx: int) -> None:
    if n_tokens >= n_ctx:
        raise APIError(400, f"This model's maximum context length is {n_ctx} tokens, but the prompt has "
                            f"{n_tokens} tokens. Please shorten the prompt.", param="messages",
                       code="context_length_exceeded")
