"""POST /completion: llama.cpp's native completion route (shapes in llamaserve.api.llama_server.protocol)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from llamacore.generation.events import Finished, Progress
from llamaserve.api.common import Prepared, acquire_engine, check_prompt_fits, count_adapter_usage, parse_body, respond
from llamaserve.api.errors import APIError
from llamaserve.api.llama_server.protocol import NativeCompletionRequest, final, probabilities, prompts
from llamaserve.api.state import server_state
from llamaserve.serving.choices import Choice, run_choices_reporting
from llamaserve.serving.offload import off_loop
from llamaserve.serving.structured import check_grammar, stops_and_grammar


async def llama_completion(request: Request) -> Response:
    body = await parse_body(request, NativeCompletionRequest)
    state = server_state(request)
    refused = body.refused()
    if refused:
        raise APIError(400, refused)
    if body.json_schema is not None:
        if body.grammar is not None:
            raise APIError(400, "give either grammar or json_schema, not both", param="json_schema")
        body.response_format = {"type": "json_schema", "json_schema": {"name": "output", "schema": body.json_schema}}
    stops, grammar = await stops_and_grammar(state.registry, state.grammars, body)

    async def prepare(stack: AsyncExitStack) -> Prepared:
        acquired = await acquire_engine(stack, state.registry, body, body.model)
        entry, engine = acquired.entry, acquired.engine
        model = engine.model

        def tokenize(text: str, first: bool) -> list[int]:
            return model.tokenize(text, add_special=first, parse_special=True)

        def prepare_tokens() -> list[list[int]]:
            body.token_bias(tokenize)
            body.ban_eog(model)
            return prompts(body.prompt, tokenize)

        try:
            token_lists = await off_loop(prepare_tokens)
        except ValueError as exc:
            raise APIError(400, str(exc), param="prompt") from None
        for tokens in token_lists:
            bad = [t for t in tokens if not 0 <= t < model.n_vocab]
            if bad:
                raise APIError(400, f"prompt token {bad[0]} is outside the vocabulary (0..{model.n_vocab - 1})",
                               param="prompt")
            check_prompt_fits(len(tokens), engine.n_ctx_seq, param="prompt")
        if body.grammar is not None:
            await check_grammar(model, body.grammar, state.grammars.limits)
        choices = [Choice(index=i, tokens=t or [model.token_bos], sampling=body.sampling(grammar))
                   for i, t in enumerate(token_lists)]
        # token ids come with log-probability entries: ask for those (no alternatives) when ids are sent back
        n_logprobs = body.n_probs or (0 if body.stream or body.return_tokens else None)
        events = run_choices_reporting(engine, choices, stack, max_tokens=body.limit(),
                                       adapters=acquired.selection.key, stops=stops, n_logprobs=n_logprobs,
                                       ignore_eos=body.ignore_eos, metrics=state.metrics, model_name=entry.alias,
                                       progress=body.return_progress and body.stream)
        count_adapter_usage(stack, state.registry, acquired, sum(len(c.tokens) for c in choices), choices)
        name = body.model or entry.alias

        def last(c: Choice, content: str) -> dict[str, Any]:
            assert c.timings is not None
            out = final(c.index, content, c.finish, [e.token for e in c.entries], c.timings, body, name,
                        model.detokenize(c.tokens, unparse_special=True).decode("utf-8", "replace"))
            if body.n_probs and not body.response_fields:
                out["completion_probabilities"] = [] if body.stream else probabilities(c.entries)
            return out

        def result() -> Any:
            answers = [last(c, c.text) for c in choices]
            return answers[0] if len(answers) == 1 else answers

        async def chunks() -> AsyncGenerator[Mapping[str, Any], None]:
            async for choice, event in events:
                if isinstance(event, Finished):
                    yield last(choice, "")
                    continue
                assert choice.timings is not None
                if isinstance(event, Progress):
                    yield {"index": choice.index, "content": "", "stop": False, "id_slot": -1, "tokens": [],
                           **choice.timings.progress(event)}
                    continue
                chunk: dict[str, Any] = {
                    "index": choice.index, "content": event.text, "stop": False, "id_slot": -1,
                    "tokens": [event.logprob.token] if event.logprob is not None else [],
                    "tokens_predicted": choice.timings.n_generated, "tokens_evaluated": choice.timings.n_prompt}
                if body.n_probs and event.logprob is not None:
                    chunk["completion_probabilities"] = probabilities([event.logprob])
                if body.timings_per_token:
                    chunk["timings"] = choice.timings.llama_cpp()
                yield chunk
        return events, chunks, result

    return await respond(request, body.stream, prepare)
