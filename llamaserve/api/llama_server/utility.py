"""llama.cpp server's utility routes: POST /tokenize, /detokenize and /apply-template.

Same bodies and answers as llama-server's, plus a `model` field that picks the model (the
default model without one), so tools written for llama-server work against any model here.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamacore.chat.native import for_model, render
from llamacore.chat.prompt import tool_request
from llamaserve.api.common import acquire, parse_body
from llamaserve.api.errors import APIError
from llamaserve.api.openai.protocol import ApplyTemplateRequest, DetokenizeRequest, TokenizeRequest
from llamaserve.api.state import server_state
from llamaserve.serving.offload import off_loop
from llamaserve.serving.thinking import kwargs_for

# /tokenize with_pieces answers about 25 bytes a token: more than this many tokens is refused
MAX_PIECES = 262_144


async def tokenize(request: Request) -> Response:
    body = await parse_body(request, TokenizeRequest)
    async with AsyncExitStack() as stack:
        _, loaded = await acquire(stack, server_state(request).registry, body.model)
        model = loaded.model

        def answer() -> bytes:
            """The answer's JSON, made on the worker thread too (a million ids take a while to write)."""
            tokens = model.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
            if not body.with_pieces:
                return json.dumps({"tokens": tokens}).encode()
            if len(tokens) > MAX_PIECES:
                raise APIError(400, f"the content is {len(tokens)} tokens; with_pieces answers at most {MAX_PIECES} "
                                    "(tokenize it in parts)", param="with_pieces")
            return json.dumps({"tokens": [{"id": t, "piece": _piece(model.token_to_piece(t, True))} for t in tokens]},
                              ensure_ascii=False).encode()
        return Response(await off_loop(answer), media_type="application/json")


def _piece(raw: bytes) -> str | list[int]:
    """A token's text, or its bytes where they are not valid UTF-8 on their own (as llama-server)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


async def detokenize(request: Request) -> Response:
    body = await parse_body(request, DetokenizeRequest)
    async with AsyncExitStack() as stack:
        _, loaded = await acquire(stack, server_state(request).registry, body.model)
        try:
            raw = await off_loop(loaded.model.detokenize, body.tokens)
        except (IndexError, ValueError, OverflowError) as exc:      # an id outside the vocabulary
            raise APIError(400, str(exc), param="tokens") from None
    return JSONResponse({"content": raw.decode("utf-8", "replace")})


async def apply_template(request: Request) -> Response:
    body = await parse_body(request, ApplyTemplateRequest)
    async with AsyncExitStack() as stack:
        entry, loaded = await acquire(stack, server_state(request).registry, body.model)
        messages: list[dict[str, Any]] = [m.model_dump(exclude_none=True) for m in body.messages]
        try:
            template = loaded.chat_template(entry)
            kwargs = kwargs_for(entry, template, body.chat_template_kwargs, body.reasoning_effort)
            tools, choice = tool_request(body.tools, None)
            prompt = (await off_loop(render, for_model(loaded.model, template), messages, tools=tools,
                                     tool_choice=choice, add_generation_prompt=body.add_generation_prompt,
                                     template_kwargs=kwargs)).prompt
        except ValueError as exc:
            raise APIError(400, str(exc), param="messages") from None
    return JSONResponse({"prompt": prompt})
