"""POST /v1/completions."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llamacore.chat.openai import CreateCompletionResponse, Envelope, completion_logprobs, usage
from llamacore.generation.events import Finished
from llamaserve.api.common import (
    Prepared,
    acquire_engine,
    check_prompt_fits,
    count_adapter_usage,
    parse_body,
    respond,
)
from llamaserve.api.errors import APIError
from llamaserve.api.openai.protocol import CompletionRequest
from llamaserve.api.state import server_state
from llamaserve.serving.choices import Choice, cached_tokens, run_choices
from llamaserve.serving.offload import off_loop
from llamaserve.serving.structured import check_grammar, stops_and_grammar


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
    state = server_state(request)
    if body.suffix:
        raise APIError(400, "suffix is not supported", param="suffix")
    stops, grammar = await stops_and_grammar(state.registry, state.grammars, body)

    async def prepare(stack: AsyncExitStack) -> Prepared:
        acquired = await acquire_engine(stack, state.registry, body, body.model)
        entry, engine = acquired.entry, acquired.engine
        prompts = await off_loop(_prompts, body, engine.model)
        if body.grammar is not None:
            await check_grammar(engine.model, body.grammar, state.grammars.limits)
        for tokens in prompts:
            check_prompt_fits(len(tokens), engine.n_ctx_seq)
        choices = [Choice(index=i * body.n + j, tokens=tokens, sampling=body.sampling(grammar, j))
                   for i, tokens in enumerate(prompts) for j in range(body.n)]
        echo = {c.index: engine.model.detokenize(c.tokens, True).decode("utf-8", "replace") if body.echo else ""
                for c in choices}
        events = run_choices(engine, choices, stack, max_tokens=body.max_tokens, adapters=acquired.selection.key,
                             stops=stops, n_logprobs=body.logprobs, ignore_eos=body.ignore_eos,
                             metrics=state.metrics, model_name=entry.alias)
        n_prompt = sum(len(t) for t in prompts)
        count_adapter_usage(stack, state.registry, acquired, n_prompt, choices)
        envelope = Envelope.new("cmpl", body.model or entry.alias)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        def result() -> CreateCompletionResponse:
            return envelope.completion([c.completion_choice(echo[c.index]) for c in choices],
                                       usage(n_prompt, sum(c.n_generated for c in choices),
                                             cached_tokens(choices, body.n)))

        async def chunks() -> AsyncGenerator[CreateCompletionResponse, None]:
            for c in choices:
                if echo[c.index]:
                    yield envelope.completion_chunk(c.index, echo[c.index])
            async for choice, event in events:
                if isinstance(event, Finished):
                    yield envelope.completion_chunk(choice.index, "", event.reason)
                else:
                    lp = None
                    if event.logprob is not None:
                        lp = completion_logprobs([event.logprob], [choice.length - len(event.text)])
                    yield envelope.completion_chunk(choice.index, event.text, None, lp)
            if include_usage:
                yield envelope.completion_usage_chunk(usage(n_prompt, sum(c.n_generated for c in choices),
                                                            cached_tokens(choices, body.n)))
        return events, chunks, result

    return await respond(request, body.stream, prepare)
