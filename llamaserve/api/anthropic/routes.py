"""Anthropic's Messages API: POST /v1/messages (streamed or not) and /v1/messages/count_tokens.

The request runs through the chat pipeline (the model's template, tool calls, the engine); only
the shapes differ (llamaserve.api.anthropic.protocol). Errors on these routes use Anthropic's shape.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamacore.chat.answer import AnswerFormat, Delta
from llamacore.chat.openai import assistant_message, tool_call_id
from llamacore.generation.events import Finished, FinishReason
from llamaserve.api.anthropic.protocol import (
    MessagesRequest,
    chat_messages,
    chat_tools,
    content_blocks,
    error_body,
    input_usage,
    new_message,
    stop_reason,
    template_kwargs,
)
from llamaserve.api.common import (
    Acquired,
    Prepared,
    acquire_engine,
    check_prompt_fits,
    count_adapter_usage,
    parse_body,
    respond,
    sampling_for,
)
from llamaserve.api.errors import APIError, api_error_for
from llamaserve.api.sse import named_event
from llamaserve.api.state import server_state
from llamaserve.config.settings import ServerConfig
from llamaserve.serving.chat import ChatPrompt, prepare_chat
from llamaserve.serving.choices import Choice, run_choices

log = logging.getLogger(__name__)


def _error(exc: BaseException) -> Response:
    err = api_error_for(exc)
    if err.status >= 500 and not isinstance(exc, APIError):
        log.error("messages: %s: %s", type(exc).__name__, exc)
    return JSONResponse(error_body(err.status, err.message), status_code=err.status, headers=err.headers)


async def messages(request: Request) -> Response:
    try:
        return await _messages(request)
    except Exception as exc:     # every failure in Anthropic's shape on this route
        return _error(exc)


async def count_tokens(request: Request) -> Response:
    try:
        body = await parse_body(request, MessagesRequest)
        async with AsyncExitStack() as stack:
            prompt = await _prompt(server_state(request).config, await acquire_engine(
                stack, server_state(request).registry, body, body.model), body)
        return JSONResponse({"input_tokens": len(prompt.tokens)})
    except ValueError as exc:
        return _error(APIError(400, str(exc)))
    except Exception as exc:
        return _error(exc)


async def _prompt(config: ServerConfig, acquired: Acquired, body: MessagesRequest) -> ChatPrompt:
    tools, tool_choice = chat_tools(body)
    return await prepare_chat(config, acquired.loaded, acquired.entry, chat_messages(body), tools, tool_choice,
                              chat_template_kwargs=template_kwargs(body))


async def _messages(request: Request) -> Response:
    body = await parse_body(request, MessagesRequest)
    if body.max_tokens is None:
        raise APIError(400, "max_tokens: Field required", param="max_tokens")
    state = server_state(request)

    async def prepare(stack: AsyncExitStack) -> Prepared:
        acquired = await acquire_engine(stack, state.registry, body, body.model)
        entry, engine = acquired.entry, acquired.engine
        try:
            prompt = await _prompt(state.config, acquired, body)
        except ValueError as exc:
            raise APIError(400, str(exc)) from None
        tokens, answer = prompt.tokens, prompt.answer
        check_prompt_fits(len(tokens), engine.n_ctx_seq)
        user_stops = list(body.stop_sequences or [])
        sampling = prompt.sampling(sampling_for(entry, body, temperature=body.temperature, top_k=body.top_k,
                                                top_p=body.top_p))
        choice = Choice(index=0, tokens=tokens, sampling=sampling)
        events = run_choices(engine, [choice], stack, max_tokens=body.max_tokens, adapters=acquired.selection.key,
                             stops=prompt.stops + user_stops, n_logprobs=None, ignore_eos=False,
                             metrics=state.metrics, model_name=entry.alias, preserved=prompt.preserved)
        count_adapter_usage(stack, state.registry, acquired, len(tokens), [choice])
        message = new_message(body.model or entry.alias, len(tokens))

        def finish(finished: Finished | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            reply, reason = assistant_message(choice.text, finished.reason if finished else None, answer)
            blocks = content_blocks(reply)
            stop, sequence = stop_reason(reason, finished.stop_sequence if finished else None, user_stops,
                                         any(b["type"] == "tool_use" for b in blocks))
            return blocks, {"stop_reason": stop, "stop_sequence": sequence}

        def final_usage() -> dict[str, int]:
            n_cached = choice.timings.n_cached if choice.timings is not None else 0
            return input_usage(len(tokens), n_cached) | {"output_tokens": choice.n_generated}

        def result() -> dict[str, Any]:
            blocks, ending = finish(choice.finish)
            return {**message, "content": blocks, **ending, "usage": final_usage()}

        async def stream() -> AsyncGenerator[str, None]:
            yield named_event("message_start", {"type": "message_start", "message": message})
            live = _LiveBlocks(answer)
            yield named_event("ping", {"type": "ping"})
            async for _, event in events:
                if not isinstance(event, Finished) and event.text:
                    for item in live.push(event.text):
                        yield item
            finished = choice.finish
            for item in live.finish(cut=finished is not None and finished.reason is FinishReason.LENGTH):
                yield item
            stop, sequence = stop_reason(finished.reason if finished else None,
                                         finished.stop_sequence if finished else None, user_stops, live.called)
            ending = {"stop_reason": stop, "stop_sequence": sequence}
            yield named_event("message_delta", {"type": "message_delta", "delta": ending, "usage": final_usage()})
            yield named_event("message_stop", {"type": "message_stop"})

        return events, stream, result

    return await respond(request, body.stream, prepare, encode=str, end="",
                         on_error=lambda err: named_event("error", error_body(err.status, err.message)))




class _LiveBlocks:
    """Content blocks streamed as llama.cpp's parser reads the text: a thinking block (thinking_delta
    events, closed by an empty signature_delta as llama-server does) while the model reasons, text
    blocks for the answer, and a tool_use block per call, opened with its id and name and filled by
    input_json_delta events as its arguments are generated."""

    def __init__(self, answer: AnswerFormat) -> None:
        self.reader = answer.reader(tool_call_id, separate_reasoning=True)
        self.index = -1
        self.kind: str | None = None            # the open block's type, if any
        self.opened = 0                         # blocks started so far
        self.called = False

    def open(self, kind: str, start: dict[str, Any] | None = None) -> list[str]:
        out = self.close()
        self.index, self.kind = self.opened, kind
        self.opened += 1
        if start is None:
            start = {"type": "thinking", "thinking": ""} if kind == "thinking" else {"type": "text", "text": ""}
        out.append(named_event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                       "content_block": start}))
        return out

    def close(self) -> list[str]:
        if self.kind is None:
            return []
        out = []
        if self.kind == "thinking":
            out.append(self._delta({"type": "signature_delta", "signature": ""}))
        out.append(named_event("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        self.kind = None
        return out

    def push(self, text: str) -> list[str]:
        return self._events(self.reader.push(text))

    def finish(self, cut: bool) -> list[str]:
        """The last events; an answer `cut` by max_tokens ends as far as it was read."""
        out = [] if cut else self._events(self.reader.finish())
        if self.opened == 0:                    # an empty answer still has its text block
            out += self.open("text")
        return out + self.close()

    def _events(self, deltas: list[Delta]) -> list[str]:
        out: list[str] = []
        for d in deltas:
            if d.reasoning:
                if self.kind != "thinking":
                    out += self.open("thinking")
                out.append(self._delta({"type": "thinking_delta", "thinking": d.reasoning}))
            if d.content:
                if self.kind != "text":
                    out += self.open("text")
                out.append(self._delta({"type": "text_delta", "text": d.content}))
            if d.tool_index >= 0:
                if d.tool_name:
                    self.called = True
                    out += self.open(f"tool_use:{d.tool_index}", {
                        "type": "tool_use", "id": "toolu_" + d.tool_id.removeprefix("call_"), "name": d.tool_name,
                        "input": {}})
                if d.arguments:
                    out.append(self._delta({"type": "input_json_delta", "partial_json": d.arguments}))
        return out

    def _delta(self, delta: dict[str, Any]) -> str:
        return named_event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

