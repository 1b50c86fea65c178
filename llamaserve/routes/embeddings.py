"""POST /v1/embeddings."""

from __future__ import annotations

import asyncio
import base64
from contextlib import AsyncExitStack

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamaserve.errors import APIError
from llamaserve.routes.requests import acquire, parse_body
from llamaserve.schemas import EmbeddingRequest


async def embeddings(request: Request) -> Response:
    body = await parse_body(request, EmbeddingRequest)
    if body.input == "" or body.input == []:
        raise APIError(400, "input must not be empty", param="input")
    if body.lora_adapters is not None or body.lora is not None:
        raise APIError(400, "embeddings take no LoRA adapters (lora_adapters and lora apply to completions and "
                            "chat)", param="lora_adapters" if body.lora_adapters is not None else "lora")
    async with AsyncExitStack() as stack:
        entry, loaded = await acquire(stack, request.app.state.registry, body.model)
        if loaded.embedder is None:
            raise APIError(400, f"model '{entry.alias}' is not an embedding model (set embedding: true)",
                           param="model")
        size = loaded.embedding_size()
        if body.dimensions is not None and body.dimensions != size:
            # shortening is only meaningful for Matryoshka-trained models, which GGUF does not mark
            raise APIError(400, f"model '{entry.alias}' returns {size}-dimensional embeddings and cannot "
                                f"return {body.dimensions}; leave dimensions out or set it to {size}",
                           param="dimensions")
        async with loaded.embed_lock:
            try:
                result = await asyncio.to_thread(loaded.embedder.create_embedding, body.input,
                                                 body.model or entry.alias, True, body.truncate)
            except ValueError as exc:
                code = "context_length_exceeded" if "the limit is" in str(exc) else None
                hint = "; send \"truncate\": true to cut it" if code else ""
                raise APIError(400, f"{exc}{hint}", param="input", code=code) from None
    if body.encoding_format == "base64":
        for item in result["data"]:
            item["embedding"] = base64.b64encode(np.asarray(item["embedding"], dtype="<f4").tobytes()).decode()
    return JSONResponse(result)
