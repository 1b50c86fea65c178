"""OpenAI's completion, chat, chunk and logprob shapes: the one place that builds them.

`Llama` and every llamaserve route build their results here, so the library and the server
answer alike. The TypedDicts are in llamacore.llama_types (llama-cpp-python's names). A
`ChoiceOutput` gathers what one choice produced (text, logprob entries with their offsets, the
finish); `ChatStream` turns a choice's events into chat deltas, holding content back while
tools are offered so that a tool call comes out as `tool_calls`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llamacore._version import __version__
from llamacore.chat import tool_calls
from llamacore.chat.reasoning import Reasoning
from llamacore.generation.events import Finished, FinishReason, Text, TextEvent
from llamacore.generation.logprobs import TokenLogprob
from llamacore.llama_types import (
    ChatCompletionLogprobs,
    ChatCompletionResponseChoice,
    ChatCompletionResponseMessage,
    ChatCompletionStreamResponseDelta,
    ChatCompletionTopLogprobToken,
    CompletionChoice,
    CompletionLogprobs,
    CompletionUsage,
    CreateChatCompletionResponse,
    CreateChatCompletionStreamResponse,
    CreateCompletionResponse,
    CreateCompletionStreamResponse,
    CreateEmbeddingResponse,
    Embedding,
    EmbeddingUsage,
)

# what OpenAI's `system_fingerprint` names: the build that answered, in llama-server's form b<build>
SYSTEM_FINGERPRINT = f"b{__version__}"

# -- builders ----------------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> CompletionUsage:
    """OpenAI's usage; `cached_tokens` (prompt tokens found in the KV cache) where the caller knows them."""
    out: CompletionUsage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                            "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


def embedding_response(vectors: list[Any], model: str, n_tokens: int) -> CreateEmbeddingResponse:
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}


def completion_logprobs(entries: list[TokenLogprob], offsets: list[int]) -> CompletionLogprobs:
    return {
        "tokens": [e.text for e in entries],
        "text_offset": list(offsets),
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{t: lp for _, t, lp in e.top} for e in entries],
    }


def chat_logprobs(entries: list[TokenLogprob]) -> ChatCompletionLogprobs:
    def item(text: str, lp: float | None) -> ChatCompletionTopLogprobToken:
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
    return {"content": [{**item(e.text, e.logprob), "top_logprobs": [item(t, lp) for _, t, lp in e.top]}
                        for e in entries]}


@dataclass
class Envelope:
    """What every object of one response shares: its id, creation time and model name."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def new(cls, prefix: str, model: str) -> Envelope:
        return cls(new_id(prefix), model)

    def completion(self, choices: list[CompletionChoice], usage: CompletionUsage) -> CreateCompletionResponse:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": choices, "usage": usage}

    def completion_chunk(self, index: int, text: str, finish: FinishReason | None = None,
                         logprobs: CompletionLogprobs | None = None) -> CreateCompletionStreamResponse:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [{"text": text, "index": index, "logprobs": logprobs,
                             "finish_reason": _reason(finish)}]}

    def completion_usage_chunk(self, usage: CompletionUsage) -> CreateCompletionStreamResponse:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [], "usage": usage}

    def chat(self, choices: list[ChatCompletionResponseChoice], usage: CompletionUsage) -> CreateChatCompletionResponse:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": choices, "usage": usage}

    def chat_chunk(self, index: int, delta: ChatCompletionStreamResponseDelta, finish: FinishReason | None = None,
                   logprobs: ChatCompletionLogprobs | None = None) -> CreateChatCompletionStreamResponse:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                             "finish_reason": _reason(finish)}]}

    def chat_usage_chunk(self, usage: CompletionUsage) -> CreateChatCompletionStreamResponse:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [], "usage": usage}


def _reason(finish: FinishReason | None) -> str | None:
    return None if finish is None else FinishReason(finish).value


@dataclass
class ChoiceOutput:
    """What one choice has produced so far: text parts, logprob entries at their offsets, the finish."""

    index: int = 0
    parts: list[str] = field(default_factory=list)
    entries: list[TokenLogprob] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    finish: Finished | None = None
    length: int = 0

    def add(self, event: Text | Finished) -> int:
        """Record an event; returns the text offset at which a Text event's text starts."""
        if isinstance(event, Finished):
            self.finish = event
            return self.length
        start = self.length
        if event.logprob is not None:
            self.entries.append(event.logprob)
            self.offsets.append(start)
        self.parts.append(event.text)
        self.length += len(event.text)
        return start

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def n_generated(self) -> int:
        return self.finish.n_generated if self.finish else 0

    def completion_choice(self, prefix: str = "") -> CompletionChoice:
        """This choice in a `text_completion` (`prefix`: the echoed prompt)."""
        lp = completion_logprobs(self.entries, self.offsets) if self.entries else None
        return {"text": prefix + self.text, "index": self.index, "logprobs": lp,
                "finish_reason": _reason(self.finish.reason if self.finish else None)}

    def chat_choice(self, tool_style: str | None, reasoning: Reasoning | None = None) -> ChatCompletionResponseChoice:
        """This choice in a `chat.completion`; with a `tool_style`, text that parses as calls becomes tool_calls;
        with `reasoning`, a thinking block becomes reasoning_content."""
        message, finish = assistant_message(self.text, self.finish.reason if self.finish else None, tool_style,
                                            reasoning)
        return {"index": self.index, "message": message,
                "logprobs": chat_logprobs(self.entries) if self.entries else None,
                "finish_reason": _reason(finish)}


def assistant_message(text: str, finish: FinishReason | None, tool_style: str | None,
                      reasoning: Reasoning | None = None) -> tuple[ChatCompletionResponseMessage, FinishReason | None]:
    """The assistant message for generated text and its finish reason (tool_calls when calls parsed); with
    `reasoning`, the thinking block is split off into reasoning_content and the rest is the answer."""
    if reasoning is None:
        return _answer_message(text, finish, tool_style)
    thought, answer = reasoning.split(text)
    message, finish = _answer_message(answer, finish, tool_style)
    if thought:
        message["reasoning_content"] = thought
    return message, finish


def _answer_message(text: str, finish: FinishReason | None,
                    tool_style: str | None) -> tuple[ChatCompletionResponseMessage, FinishReason | None]:
    if tool_style is not None:
        content, calls = tool_calls.parse(text, tool_style)
        if calls:
            message: ChatCompletionResponseMessage = {"role": "assistant", "content": content,
                                                      "tool_calls": calls}  # type: ignore[typeddict-item]
            return message, FinishReason.TOOL_CALLS
        if finish is FinishReason.LENGTH:       # cut inside a call: its partial arguments, never markup
            content, calls = tool_calls.parse_partial(text, tool_style)
            if calls:
                return {"role": "assistant", "content": content, "tool_calls": calls}, finish  # type: ignore[typeddict-item]
    return {"role": "assistant", "content": text}, finish


class ChatStream:
    """Chat chunks of one choice: the role first, then content deltas, then the finish.

    With tools offered (`tool_style` set), content is held until the end so that text which
    parses as tool calls is sent as one `tool_calls` delta instead of as content. With `reasoning`,
    a thinking block streams as `reasoning_content` deltas (never held).
    """

    def __init__(self, envelope: Envelope, output: ChoiceOutput, tool_style: str | None,
                 reasoning: Reasoning | None = None) -> None:
        self.envelope, self.output, self.tool_style = envelope, output, tool_style
        self.reasoning = reasoning
        self.splitter = reasoning.splitter() if reasoning is not None else None

    def start(self) -> CreateChatCompletionStreamResponse:
        return self.envelope.chat_chunk(self.output.index, {"role": "assistant", "content": None})

    def push(self, event: Text | Finished) -> list[CreateChatCompletionStreamResponse]:
        """Record `event` in the output and return the chunks it releases."""
        self.output.add(event)
        return self.chunks(event)

    def chunks(self, event: Text | Finished) -> list[CreateChatCompletionStreamResponse]:
        """The chunks an event releases, once the output has recorded it."""
        index, chunk = self.output.index, self.envelope.chat_chunk
        if isinstance(event, Text):
            lp = chat_logprobs([event.logprob]) if event.logprob is not None else None
            if self.splitter is not None:
                return self._split_chunks(self.splitter.push(event.text), lp)
            if self.tool_style is not None or not (event.text or event.logprob is not None):
                return []
            return [chunk(index, {"content": event.text}, None, lp)]
        out = self._split_chunks(self.splitter.finish(), None) if self.splitter is not None else []
        if self.tool_style is None:
            return [*out, chunk(index, {}, event.reason)]
        message, finish = assistant_message(self.output.text, event.reason, self.tool_style, self.reasoning)
        if message.get("content"):
            out.append(chunk(index, {"content": message["content"]}))
        if "tool_calls" in message:
            calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            out.append(chunk(index, {"tool_calls": calls}))    # type: ignore[typeddict-item]
        out.append(chunk(index, {}, finish))
        return out

    def _split_chunks(self, parts: list[tuple[str, str]],
                      lp: ChatCompletionLogprobs | None) -> list[CreateChatCompletionStreamResponse]:
        """Deltas for a splitter's (kind, text) parts; content is held while tools are offered. A token's
        logprobs go with its first delta (or an empty content delta when it released none)."""
        out = []
        for kind, text in parts:
            if kind == "reasoning":
                delta: ChatCompletionStreamResponseDelta = {"reasoning_content": text}
            elif self.tool_style is None:
                delta = {"content": text}
            else:
                continue
            out.append(self.envelope.chat_chunk(self.output.index, delta, None, lp))
            lp = None
        if lp is not None and self.tool_style is None:
            out.append(self.envelope.chat_chunk(self.output.index, {"content": ""}, None, lp))
        return out



def chat_chunks(events: Iterator[TextEvent], stream: ChatStream) -> Iterator[CreateChatCompletionStreamResponse]:
    yield stream.start()
    for event in events:
        yield from stream.push(event)


__all__ = [
    "ChatCompletionLogprobs", "ChatStream", "ChoiceOutput", "CompletionChoice", "CompletionLogprobs",
    "CompletionUsage", "CreateChatCompletionResponse", "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse", "CreateCompletionStreamResponse", "CreateEmbeddingResponse", "Embedding",
    "EmbeddingUsage", "Envelope", "assistant_message", "chat_chunks", "chat_logprobs", "completion_logprobs",
    "embedding_response", "new_id", "usage",
]
