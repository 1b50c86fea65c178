"""POST /v1/embeddings (OpenAI's shape), and llama-server's native /embedding and /embeddings."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamaserve.api.common import acquire, parse_body
from llamaserve.api.errors import APIError
from llamaserve.api.llama_server.protocol import prompts
from llamaserve.api.openai.protocol import EmbeddingRequest, NativeEmbeddingRequest
from llamaserve.api.state import server_state
from llamaserve.serving.offload import off_loop

_MEDIA = ("image_url", "input_audio", "input_video")


async def embeddings(request: Request) -> Response:
    body = await parse_body(request, EmbeddingRequest)
    result = await _embed(request, body, body.input, oai=True)
    if body.encoding_format == "base64":
        for item in result["data"]:
            item["embedding"] = base64.b64encode(np.asarray(item["embedding"], dtype="<f4").tobytes()).decode()
    return JSONResponse(result)


async def native_embeddings(request: Request) -> Response:
    """llama-server's shape: [{"index", "embedding": [vector]}], or one vector per token under pooling `none`."""
    body = await parse_body(request, NativeEmbeddingRequest)
    raw = body.input if body.input is not None else body.content
    if raw is None:
        raise APIError(400, '"input" or "content" must be provided', param="input")
    result = await _embed(request, body, raw, oai=False)
    return JSONResponse([{"index": d["index"], "embedding": d["embedding"] if result["per_token"] else [d["embedding"]]}
                         for d in result["data"]])


async def _embed(request: Request, body: EmbeddingRequest, raw: Any, oai: bool) -> dict[str, Any]:
    """create_embedding's OpenAI-shaped result, plus "per_token" (pooling `none`: one vector per token)."""
    if raw == []:
        raise APIError(400, "input must not be empty", param="input")
    if body.lora_adapters is not None or body.lora is not None:
        raise APIError(400, "embeddings take no LoRA adapters (lora_adapters and lora apply to completions and "
                            "chat)", param="lora_adapters" if body.lora_adapters is not None else "lora")
    async with AsyncExitStack() as stack:
        entry, loaded = await acquire(stack, server_state(request).registry, body.model)
        if loaded.embedder is None:
            raise APIError(400, f"model '{entry.alias}' is not an embedding model (set embedding: true)",
                           param="model")
        per_token = loaded.embedding_pooling() == "none"
        if per_token and oai:
            raise APIError(400, f"model '{entry.alias}' has pooling type 'none' (one vector per token), which "
                                "the OpenAI API cannot return; use /embeddings, or another pooling_type",
                           param="input")
        size = loaded.embedding_size()
        if body.dimensions is not None and body.dimensions != size:
            # shortening is only meaningful for Matryoshka-trained models, which GGUF does not mark
            raise APIError(400, f"model '{entry.alias}' returns {size}-dimensional embeddings and cannot "
                                f"return {body.dimensions}; leave dimensions out or set it to {size}",
                           param="dimensions")
        model = loaded.embedder.model

        def tokenize(text: str, first: bool) -> list[int]:
            return model.tokenize(text, add_special=first, parse_special=False)

        try:
            token_lists = await off_loop(input_tokens, raw, tokenize)
        except ValueError as exc:
            raise APIError(400, str(exc), param="input") from None
        async with loaded.embed_lock:
            decodes, started = loaded.embedder.embed_decodes, time.monotonic()
            try:
                # per-token vectors stay as the model made them (llama-server normalizes pooled ones only)
                result = await asyncio.to_thread(loaded.embedder.create_embedding, token_lists,
                                                 body.model or entry.alias, not per_token, body.truncate)
            except ValueError as exc:
                code = "context_length_exceeded" if "the limit is" in str(exc) else None
                hint = "; send \"truncate\": true to cut it" if code else ""
                raise APIError(400, f"{exc}{hint}", param="input", code=code) from None
            server_state(request).metrics.llamacpp.observe_embedding(
                result["usage"]["prompt_tokens"], time.monotonic() - started, loaded.embedder.embed_decodes - decodes)
    return {**result, "per_token": per_token} if not oai else dict(result)


def input_tokens(raw: Any, tokenize: Callable[[str, bool], list[int]]) -> list[list[int]]:
    """The token lists of an embedding request's input, in llama-server's forms: a string, a list of
    token ids (strings may be mixed in: one input), a {"prompt_string"} or {"content": [parts]} object,
    or a list of any of these (one input each). `tokenize(text, first)` adds the model's specials when
    `first`; an empty string gives just those (for BERT: [CLS] [SEP])."""
    several = isinstance(raw, list) and not any(isinstance(p, int) for p in raw)
    items = raw if several else [raw]
    if not items:
        raise ValueError("input must not be empty")
    lists = []
    for item in items:
        if isinstance(item, dict) and "content" in item:
            lists.append(tokenize(_content_text(item["content"]), True))
        else:
            lists.append(prompts([item], tokenize)[0])
    return lists


def _content_text(content: Any) -> str:
    """The text of OpenAI content parts ({"type": "text", "text": ...}), joined as llama-server does."""
    if not isinstance(content, list):
        raise ValueError('"content" must be an array of content parts')
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in _MEDIA:
            raise ValueError(f"content part {kind} needs a multimodal model; this one takes text only")
        else:
            raise ValueError(f'content parts must be {{"type": "text", "text": ...}}, got {str(part)[:60]}')
    return "".join(texts)
