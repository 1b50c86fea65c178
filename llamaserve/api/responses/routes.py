"""OpenAI's Responses API: POST /v1/responses (streamed or not), GET and DELETE /v1/responses/{id}.

The request runs through the chat pipeline (the model's template, tool calls, grammars, the
engine); llamaserve.api.responses.protocol converts the shapes and llamaserve.api.responses.store keeps what
`previous_response_id` continues. A stream sends OpenAI's typed events, each with its
`sequence_number`: reasoning (response.reasoning_text.delta), text and function calls (an item with
the name, then response.function_call_arguments.delta) stream as llama.cpp's parser reads the answer;
markup that may become a call is held back until it is one. Errors use OpenAI's shape.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from llamacore.chat.answer import AnswerReader, Delta, text_parts
from llamacore.chat.openai import assistant_message, tool_call_id
from llamacore.generation.events import Finished, FinishReason, Progress
from llamaserve.api.common import (
    Prepared,
    acquire_engine,
    check_prompt_fits,
    count_adapter_usage,
    parse_body,
    respond,
    sampling_for,
)
from llamaserve.api.errors import APIError
from llamaserve.api.responses.protocol import (
    ResponseDraft,
    ResponsesRequest,
    chat_messages,
    chat_tools,
    check_supported,
    input_items,
    message_item,
    new_id,
    output_items,
    response_format,
)
from llamaserve.api.responses.store import ResponseStore
from llamaserve.api.sse import named_event
from llamaserve.api.state import server_state
from llamaserve.serving.chat import ToolsRefused, prepare_chat
from llamaserve.serving.choices import Choice, run_choices_reporting
from llamaserve.serving.structured import format_grammar


class Events:
    """The server-sent events of one streamed response, numbered by `sequence_number` from 0."""

    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, kind: str, **data: Any) -> str:
        payload = {"type": kind, **data, "sequence_number": self.sequence}
        self.sequence += 1
        return named_event(kind, payload)

    def error(self, err: APIError) -> str:
        return self("error", code=err.code, message=err.message, param=err.param)

    def message_start(self, index: int, item_id: str) -> list[str]:
        item = {**message_item(item_id, "", "in_progress"), "content": []}
        return [self("response.output_item.added", output_index=index, item=item),
                self("response.content_part.added", item_id=item_id, output_index=index, content_index=0,
                     part={"type": "output_text", "text": "", "annotations": []})]

    def text_delta(self, index: int, item_id: str, text: str, **extra: Any) -> str:
        return self("response.output_text.delta", item_id=item_id, output_index=index, content_index=0,
                    delta=text, logprobs=[], **extra)

    def message_end(self, index: int, item: dict[str, Any]) -> list[str]:
        part = item["content"][0]
        return [self("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                     text=part["text"], logprobs=[]),
                self("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                     part=part),
                self("response.output_item.done", output_index=index, item=item)]

    def reasoning_start(self, index: int, item_id: str) -> str:
        return self("response.output_item.added", output_index=index,
                    item={"type": "reasoning", "id": item_id, "summary": [], "content": []})

    def reasoning_delta(self, index: int, item_id: str, text: str) -> str:
        return self("response.reasoning_text.delta", item_id=item_id, output_index=index, content_index=0,
                    delta=text)

    def reasoning_end(self, index: int, item: dict[str, Any]) -> list[str]:
        return [self("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0,
                     text=item["content"][0]["text"]),
                self("response.output_item.done", output_index=index, item=item)]

    def whole_item(self, index: int, item: dict[str, Any]) -> list[str]:
        """A finished output item as the events that add it, carry its text or arguments, and end it."""
        if item["type"] == "reasoning":
            return [self.reasoning_start(index, item["id"]),
                    self.reasoning_delta(index, item["id"], item["content"][0]["text"]),
                    *self.reasoning_end(index, item)]
        if item["type"] == "message":
            return [*self.message_start(index, item["id"]),
                    self.text_delta(index, item["id"], item["content"][0]["text"]), *self.message_end(index, item)]
        return [self("response.output_item.added", output_index=index,
                     item={**item, "arguments": "", "status": "in_progress"}),
                self("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                     delta=item["arguments"]),
                *self.call_end(index, item)]

    def call_end(self, index: int, item: dict[str, Any]) -> list[str]:
        return [self("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                     name=item["name"], arguments=item["arguments"]),
                self("response.output_item.done", output_index=index, item=item)]


@contextmanager
def _refused_as(param: str) -> Iterator[None]:
    """A ValueError inside (a bad tool, message or schema) becomes a 400 naming `param`."""
    try:
        yield
    except ValueError as exc:
        raise APIError(400, str(exc), param=param) from None


async def create_response(request: Request) -> Response:
    body = await parse_body(request, ResponsesRequest)
    check_supported(body)
    state = server_state(request)
    store: ResponseStore = state.responses
    history = [] if body.previous_response_id is None else \
        store.get(body.previous_response_id, "previous_response_id").conversation()
    items = [*history, *input_items(body.input)]
    messages = chat_messages(body.instructions, items)
    tools, tool_choice = chat_tools(body.tools, body.tool_choice)
    text_format = response_format(body.text)
    write = Events()

    async def prepare(stack: AsyncExitStack) -> Prepared:
        acquired = await acquire_engine(stack, state.registry, body, body.model)
        entry, engine = acquired.entry, acquired.engine
        try:
            prompt = await prepare_chat(state.config, acquired.loaded, entry, messages, tools, tool_choice,
                                        reasoning_effort=(body.reasoning or {}).get("effort"))
        except ValueError as exc:
            raise APIError(400, str(exc), param="tools" if isinstance(exc, ToolsRefused) else "input") from None
        tokens, stops, answer, grammar = prompt.tokens, prompt.stops, prompt.answer, None
        forced = prompt.tool_grammar is not None and not prompt.tool_grammar.lazy
        if text_format is not None and not forced:          # (a forced call has no text to format)
            with _refused_as("text.format.schema"):
                grammar = await format_grammar(state.grammars, text_format, entry.json_whitespace)
        check_prompt_fits(len(tokens), engine.n_ctx_seq, param="input")
        sampling = prompt.sampling(sampling_for(
            entry, body, temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p, grammar=grammar))
        choice = Choice(index=0, tokens=tokens, sampling=sampling)
        generated = run_choices_reporting(engine, [choice], stack, max_tokens=body.max_output_tokens,
                                          adapters=acquired.selection.key, stops=stops, n_logprobs=None,
                                          ignore_eos=False, metrics=state.metrics, model_name=entry.alias,
                                          progress=bool(body.return_progress and body.stream),
                                          preserved=prompt.preserved)
        count_adapter_usage(stack, state.registry, acquired, len(tokens), [choice])
        draft = ResponseDraft(body, body.model or entry.alias)

        def finish(streamed: AnswerReader | None = None, call_item_ids: Sequence[str] = ()) -> dict[str, Any]:
            """The finished response object, stored unless the request said store: false; a streamed
            answer's from its `streamed` reader (the calls keep the ids they were streamed with)."""
            finished: Finished | None = choice.finish
            reason = finished.reason if finished else None
            reply: Mapping[str, Any]
            if streamed is None:
                reply, reason = assistant_message(choice.text, reason, answer)
            else:
                reply = streamed.message
                if reply.get("tool_calls") and reason is not FinishReason.LENGTH:
                    reason = FinishReason.TOOL_CALLS
            output = output_items(reply, reason, draft.message_id, always_text=prompt.tools is None,
                                  max_calls=draft.max_calls, reasoning_id=draft.reasoning_id,
                                  call_item_ids=call_item_ids)
            final = draft.snapshot(output, len(tokens), choice.n_generated, reason, done=True)
            if body.store is not False:
                store.put(items, final, new_items=len(items) - len(history))
            return final

        async def stream() -> AsyncGenerator[str, None]:
            yield write("response.created", response=draft.snapshot([]))
            yield write("response.in_progress", response=draft.snapshot([]))
            # reasoning, text and function calls stream as llama.cpp's parser reads them (markup that
            # may become a tool call is held back): a call's item opens with its name, then its arguments
            reader = answer.reader(tool_call_id, separate_reasoning=True)
            started: list[str] = []            # the types of the items streamed so far, in output order
            calls: dict[int, tuple[int, str]] = {}      # a call's tool index -> its output index and item id

            def delta_events(deltas: list[Delta]) -> Iterator[str]:
                for d in deltas:
                    yield from parts_events(text_parts([d]))
                    if d.tool_index < 0 or (draft.max_calls is not None and d.tool_index >= draft.max_calls):
                        continue
                    if d.tool_index not in calls:
                        started.append("function_call")
                        calls[d.tool_index] = (len(started) - 1, new_id("fc"))
                        yield write("response.output_item.added", output_index=len(started) - 1, item={
                            "type": "function_call", "id": calls[d.tool_index][1], "call_id": d.tool_id,
                            "name": d.tool_name, "arguments": "", "status": "in_progress"})
                    if d.arguments:
                        index, item_id = calls[d.tool_index]
                        yield write("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                                    delta=d.arguments)

            def parts_events(parts: list[tuple[str, str]]) -> Iterator[str]:
                for kind, text in parts:
                    if kind == "reasoning":
                        if not started:
                            started.append("reasoning")
                            yield write.reasoning_start(0, draft.reasoning_id)
                        yield write.reasoning_delta(0, draft.reasoning_id, text)
                    else:
                        if "message" not in started:
                            started.append("message")
                            yield from write.message_start(len(started) - 1, draft.message_id)
                        yield write.text_delta(len(started) - 1, draft.message_id, text, **telemetry())

            def telemetry() -> dict[str, Any]:
                """llama-server's timings on each delta, when asked (timings_per_token)."""
                if not body.timings_per_token or choice.timings is None:
                    return {}
                return {"timings": choice.timings.llama_cpp()}

            async for _, step in generated:
                if isinstance(step, Progress):       # llama-server's prompt_progress (return_progress)
                    assert choice.timings is not None
                    yield write("response.in_progress", response=draft.snapshot([]), **choice.timings.progress(step))
                elif not isinstance(step, Finished) and step.text:
                    for event in delta_events(reader.push(step.text)):
                        yield event
            cut = choice.finish is not None and choice.finish.reason is FinishReason.LENGTH
            for event in delta_events(reader.finish() if not cut else []):
                yield event
            if prompt.tools is None and "message" not in started:      # an empty answer still has its message item
                started.append("message")
                for event in write.message_start(len(started) - 1, draft.message_id):
                    yield event
            final = finish(reader, [item_id for _, item_id in calls.values()])
            for index, item in enumerate(final["output"]):
                if index < len(started):       # streamed: only its end remains
                    ending = (write.reasoning_end(index, item) if item["type"] == "reasoning"
                              else write.message_end(index, item) if item["type"] == "message"
                              else write.call_end(index, item))
                else:
                    ending = write.whole_item(index, item)
                for event in ending:
                    yield event
            assert choice.timings is not None      # llama-server's timings, an extension field of the last event
            yield write(f"response.{final['status']}", response=final,     # completed or incomplete
                        timings=choice.timings.llama_cpp())

        return generated, stream, finish

    return await respond(request, bool(body.stream), prepare, encode=str, end="", on_error=write.error)


def _check_query(request: Request) -> None:
    if request.query_params.get("stream", "").lower() not in ("", "false", "0"):
        raise APIError(400, "stream: replaying a stored response as events is not supported", param="stream")
    if request.query_params.getlist("include"):
        raise APIError(400, "include: no additional output data is available from this server", param="include")


async def get_response(request: Request) -> Response:
    _check_query(request)
    return JSONResponse(server_state(request).responses.get(request.path_params["response_id"]).response)


async def delete_response(request: Request) -> Response:
    response_id = request.path_params["response_id"]
    server_state(request).responses.delete(response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})
