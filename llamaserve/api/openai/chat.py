"""POST /v1/chat/completions."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamacore.chat.openai import (
    ChatStream,
    Envelope,
    usage,
)
from llamacore.generation.events import Progress
from llamaserve.api.common import (
    Acquired,
    Prepared,
    acquire_engine,
    check_prompt_fits,
    count_adapter_usage,
    parse_body,
    respond,
)
from llamaserve.api.errors import APIError
from llamaserve.api.openai.protocol import ChatRequest
from llamaserve.api.state import server_state
from llamaserve.config.settings import ServerConfig
from llamaserve.serving.chat import ChatPrompt, prepare_chat
from llamaserve.serving.choices import Choice, cached_tokens, run_choices_reporting
from llamaserve.serving.structured import check_grammar, response_grammar


async def chat_completions(request: Request) -> Response:
    body = await parse_body(request, ChatRequest)
    state = server_state(request)
    if body.json_schema is not None:
        if body.response_format is not None or body.grammar is not None:
            raise APIError(400, "give one of json_schema, response_format and grammar", param="json_schema")
        body.response_format = {"type": "json_schema", "json_schema": {"name": "output", "schema": body.json_schema}}

    async def prepare(stack: AsyncExitStack) -> Prepared:
        acquired = await acquire_engine(stack, state.registry, body, body.model)
        entry, engine = acquired.entry, acquired.engine
        try:
            prompt = await _prompt(state.config, acquired, body, reasoning_format=body.reasoning_format)
            tokens, answer = prompt.tokens, prompt.answer
            grammar = await response_grammar(state.grammars, body, entry)
            samplings = [prompt.sampling(body.sampling(grammar, j)) for j in range(body.n)]
            stops = prompt.stops + body.stop_list()
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
        check_prompt_fits(len(tokens), engine.n_ctx_seq)
        if body.grammar is not None:
            await check_grammar(engine.model, body.grammar, state.grammars.limits)
        choices = [Choice(index=j, tokens=tokens, sampling=samplings[j]) for j in range(body.n)]
        events = run_choices_reporting(
            engine, choices, stack, max_tokens=body.max_completion_tokens or body.max_tokens,
            adapters=acquired.selection.key, stops=stops,
            n_logprobs=(body.top_logprobs or 0) if body.logprobs else None,
            ignore_eos=body.ignore_eos, metrics=state.metrics, model_name=entry.alias,
            progress=body.return_progress and body.stream, preserved=prompt.preserved)
        count_adapter_usage(stack, state.registry, acquired, len(tokens), choices)
        envelope = Envelope.new("chatcmpl", body.model or entry.alias)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        def result() -> dict[str, Any]:
            n_out = sum(c.n_generated for c in choices)
            out: dict[str, Any] = dict(envelope.chat([c.chat_choice(answer) for c in choices],
                                                     usage(len(tokens), n_out, cached_tokens(choices, body.n))))
            out["timings"] = timings()
            if body.verbose or state.config.verbose_responses:       # llama-server's debugging aid
                out["__verbose"] = {"prompt": engine.model.detokenize(tokens, unparse_special=True)
                                    .decode("utf-8", "replace")}
            return out

        def timings() -> dict[str, float]:
            """llama-server's timings (of the first choice), an extension field on its chat answers."""
            assert choices[0].timings is not None
            return choices[0].timings.llama_cpp()

        async def chunks() -> AsyncGenerator[Mapping[str, Any], None]:
            streams = {c.index: ChatStream(envelope, c, answer) for c in choices}
            for s in streams.values():
                yield s.start()
            async for choice, event in events:
                if isinstance(event, Progress):        # llama-server's prompt_progress, in a chunk of no choice
                    assert choice.timings is not None
                    report: dict[str, Any] = dict(envelope.chat_usage_chunk(usage(0, 0)))
                    del report["usage"]
                    yield report | choice.timings.progress(event)
                    continue
                for chunk in streams[choice.index].chunks(event):
                    if body.timings_per_token:
                        chunk["timings"] = timings()
                    yield chunk
            if include_usage:
                last = envelope.chat_usage_chunk(usage(len(tokens), sum(c.n_generated for c in choices),
                                                       cached_tokens(choices, body.n)))
                last["timings"] = timings()
                yield last
        return events, chunks, result

    return await respond(request, body.stream, prepare)


async def chat_input_tokens(request: Request) -> Response:
    """POST /v1/chat/completions/input_tokens (llama-server's): how many tokens a chat request's prompt
    takes (template, tools and all), without generating."""
    body = await parse_body(request, ChatRequest)
    async with AsyncExitStack() as stack:
        acquired = await acquire_engine(stack, server_state(request).registry, body, body.model)
        try:
            prompt = await _prompt(server_state(request).config, acquired, body)
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
    return JSONResponse({"input_tokens": len(prompt.tokens)})


async def _prompt(config: ServerConfig, acquired: Acquired, body: ChatRequest,
                  reasoning_format: str | None = None) -> ChatPrompt:
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    return await prepare_chat(config, acquired.loaded, acquired.entry, messages, body.tools, body.tool_choice,
                              reasoning_format=reasoning_format, chat_template_kwargs=body.chat_template_kwargs,
                              reasoning_effort=body.reasoning_effort,
                              add_generation_prompt=body.add_generation_prompt,
                              continue_final_message=body.continue_final_message)
