"""llama.cpp server's utility routes: POST /tokenize, /detokenize and /apply-template.

Same bodies and answers as llama-server's, plus a `model` field that picks the model (the
default model without one), so tools written for llama-server work against any model here.
"""

from __future__ import annotations

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
from llamaserve.serving.thinking import kwargs_for


async def tokenize(request: Request) -> Response:
    body = await parse_body(request, TokenizeRequest)
    async with AsyncExitStack() as stack:
        _, loaded = await acquire(stack, server_state(request).registry, body.model)
        model = loaded.model
        tokens = model.tokenize(body.content, add_special=body.add_special, parse_special=body.parse_special)
        if not body.with_pieces:
            return JSONResponse({"tokens": tokens})
        return JSONResponse({"tokens": [{"id": t, "piece": _piece(model.token_to_piece(t, True))} for t in tokens]})


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
            raw = loaded.model.detokenize(body.tokens)
        except (IndexError, ValueError) as exc:      # an id outside the vocabulary
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
            prompt = render(for_model(loaded.model, template), messages, tools=tools, tool_choice=choice,
                            add_generation_prompt=body.add_generation_prompt, template_kwargs=kwargs).prompt
        except ValueError as exc:
            raise APIError(400, str(exc), param="messages") from None
    return JSONResponse({"prompt": prompt})
