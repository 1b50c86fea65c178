"""POST /v1/chat/completions."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamacore import tool_calls
from llamacore.chat import chat_logprobs, grammar_for, prompt_tokens, tool_setup
from llamacore.completion import new_id, usage
from llamaserve.choices import Choice, run_choices
from llamaserve.errors import APIError
from llamaserve.generation import Finish
from llamaserve.routes.requests import acquire_engine, adapter_key, check_prompt_fits, parse_body
from llamaserve.schemas import ChatRequest
from llamaserve.sse import sse_response


def _message(choice: Choice, tools: bool, style: str) -> tuple[dict[str, Any], str]:
    text = "".join(choice.text)
    if tools:
        content, calls = tool_calls.parse(text, style)
        if calls:
            return {"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls"
    return {"role": "assistant", "content": text}, choice.finish.reason


async def chat_completions(request: Request) -> Response:
    body = await parse_body(request, ChatRequest)
    state = request.app.state
    stack = AsyncExitStack()
    streaming = False
    try:
        entry, loaded = await acquire_engine(stack, state.registry, body.model)
        engine, name = loaded.engine, body.model or entry.alias
        template = loaded.chat_template(entry)
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        try:
            tools, tool_grammar = tool_setup(template, body.tools, body.tool_choice)
            tokens, template_stops = prompt_tokens(engine.model, template, messages, tools)
            grammar = tool_grammar or grammar_for(body.response_format)
            stops = template_stops + body.stop_list()
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
        check_prompt_fits(len(tokens), engine.n_ctx)
        choices = [Choice(j, tokens, body.sampling(grammar, j)) for j in range(body.n)]
        events = run_choices(engine, choices, stack, max_tokens=body.max_completion_tokens or body.max_tokens,
                             adapters=adapter_key(entry), stops=stops,
                             n_logprobs=(body.top_logprobs or 0) if body.logprobs else None,
                             ignore_eos=body.ignore_eos, metrics=state.metrics, model_name=entry.alias)
        style = tool_calls.style_for(template)
        cid, created = new_id("chatcmpl"), int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            streaming = True
            return sse_response(_stream(events, choices, bool(tools), style, cid, created, name, len(tokens),
                                        include_usage), release=stack.aclose)
        async for _ in events:
            pass
    finally:
        if not streaming:
            await stack.aclose()
    out = []
    for c in choices:
        message, finish = _message(c, bool(tools), style)
        lp = chat_logprobs(c.logprobs.as_completion()) if c.logprobs else None
        out.append({"index": c.index, "message": message, "logprobs": lp, "finish_reason": finish})
    return JSONResponse({
        "id": cid, "object": "chat.completion", "created": created, "model": name, "choices": out,
        "usage": usage(len(tokens), sum(c.finish.completion_tokens for c in choices)),
    })


async def _stream(events, choices, tools, style, cid, created, name, n_prompt, include_usage):
    """Role first, then content deltas; with tools, content is held to return calls as tool_calls."""
    def chunk(index: int, delta: dict[str, Any], finish: str | None, lp: dict | None = None) -> dict[str, Any]:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                "choices": [{"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}]}
    for c in choices:
        yield chunk(c.index, {"role": "assistant", "content": ""}, None)
    async for choice, item in events:
        if isinstance(item, Finish):
            finish = item.reason
            if tools:
                message, finish = _message(choice, True, style)
                if message.get("content"):
                    yield chunk(choice.index, {"content": message["content"]}, None)
                if "tool_calls" in message:
                    calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
                    yield chunk(choice.index, {"tool_calls": calls}, None)
            yield chunk(choice.index, {}, finish)
        elif not tools and (item.text or item.logprob is not None):
            lp = None
            if item.logprob is not None:
                lp = chat_logprobs({"tokens": [item.logprob.text], "token_logprobs": [item.logprob.logprob],
                                    "top_logprobs": [{t: v for _, t, v in item.logprob.top}]})
            yield chunk(choice.index, {"content": item.text}, None, lp)
    if include_usage:
        yield {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name, "choices": [],
               "usage": usage(n_prompt, sum(c.finish.completion_tokens for c in choices if c.finish))}
