"""POST /v1/completions."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamacore.chat import grammar_for
from llamacore.completion import new_id, usage
from llamaserve.choices import Choice, run_choices
from llamaserve.errors import APIError
from llamaserve.generation import Finish
from llamaserve.routes.requests import acquire_engine, adapter_key, check_prompt_fits, parse_body
from llamaserve.schemas import CompletionRequest
from llamaserve.sse import sse_response


def _prompts(body: CompletionRequest, model) -> list[list[int]]:
    p = body.prompt
    if isinstance(p, str):
        items: list[Any] = [p]
    elif p and all(isinstance(t, int) for t in p):
        items = [p]
    else:
        items = list(p) or [""]
    out = []
    for item in items:
        if isinstance(item, str):
            tokens = model.tokenize(item, add_special=True, parse_special=False)
        else:
            tokens = list(item)
            bad = [t for t in tokens if not 0 <= t < model.n_vocab]
            if bad:
                raise APIError(400, f"prompt token {bad[0]} is outside the vocabulary (0..{model.n_vocab - 1})",
                               param="prompt")
        out.append(tokens or [model.token_bos])
    return out


async def completions(request: Request) -> Response:
    body = await parse_body(request, CompletionRequest)
    state = request.app.state
    if body.suffix:
        raise APIError(400, "suffix is not supported", param="suffix")
    try:
        stops = body.stop_list()
        grammar = grammar_for(body.response_format)
    except ValueError as exc:
        raise APIError(400, str(exc)) from None
    stack = AsyncExitStack()
    streaming = False
    try:
        entry, loaded = await acquire_engine(stack, state.registry, body.model)
        engine, name = loaded.engine, body.model or entry.alias
        prompts = _prompts(body, engine.model)
        for tokens in prompts:
            check_prompt_fits(len(tokens), engine.n_ctx)
        choices = [Choice(i * body.n + j, tokens, body.sampling(grammar, j))
                   for i, tokens in enumerate(prompts) for j in range(body.n)]
        echo = {c.index: engine.model.detokenize(c.tokens, True).decode("utf-8", "replace") if body.echo else ""
                for c in choices}
        events = run_choices(engine, choices, stack, max_tokens=body.max_tokens, adapters=adapter_key(entry),
                             stops=stops, n_logprobs=body.logprobs, ignore_eos=body.ignore_eos,
                             metrics=state.metrics, model_name=entry.alias)
        n_prompt = sum(len(t) for t in prompts)
        cid, created = new_id("cmpl"), int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            streaming = True
            return sse_response(_stream(events, choices, echo, cid, created, name, n_prompt, include_usage),
                                release=stack.aclose)
        async for _ in events:
            pass
    finally:
        if not streaming:
            await stack.aclose()
    return JSONResponse({
        "id": cid, "object": "text_completion", "created": created, "model": name,
        "choices": [{"index": c.index, "text": echo[c.index] + "".join(c.text),
                     "logprobs": c.logprobs.as_completion() if c.logprobs else None,
                     "finish_reason": c.finish.reason} for c in choices],
        "usage": usage(n_prompt, sum(c.finish.completion_tokens for c in choices)),
    })


async def _stream(events, choices, echo, cid, created, name, n_prompt, include_usage):
    def chunk(index: int, text: str, finish: str | None, logprobs: dict | None = None) -> dict[str, Any]:
        return {"id": cid, "object": "text_completion", "created": created, "model": name,
                "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}]}
    for c in choices:
        if echo[c.index]:
            yield chunk(c.index, echo[c.index], None)
    async for choice, item in events:
        if isinstance(item, Finish):
            yield chunk(choice.index, "", item.reason)
        else:
            lp = None
            if item.logprob is not None:
                lp = {"tokens": [item.logprob.text], "text_offset": [choice.offset - len(item.text)],
                      "token_logprobs": [item.logprob.logprob],
                      "top_logprobs": [{t: v for _, t, v in item.logprob.top}]}
            yield chunk(choice.index, item.text, None, lp)
    if include_usage:
        yield {"id": cid, "object": "text_completion", "created": created, "model": name, "choices": [],
               "usage": usage(n_prompt, sum(c.finish.completion_tokens for c in choices if c.finish))}
