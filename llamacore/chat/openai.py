"""OpenAI's completion, chat, chunk and logprob shapes: the one place that builds them.

`Llama` and every llamaserve route build their results here, so the library and the server
answer alike. The TypedDicts are in llamacore.llama_types (llama-cpp-python's names). A
`ChoiceOutput` gathers what one choice produced (text, logprob entries with their offsets, the
finish); `ChatStream` turns a choice's events into chat deltas: reasoning_content, content and
tool_calls as llama.cpp's parser reads them (llamacore.chat.answer), arguments as they grow.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llamacore._version import __version__
from llamacore.chat.answer import AnswerFormat, Delta
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


def tool_call_id() -> str:
    """An id for a tool call the model gave none (OpenAI's call_ form)."""
    return f"call_{uuid.uuid4().hex[:24]}"


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

    def chat_choice(self, answer: AnswerFormat | None) -> ChatCompletionResponseChoice:
        """This choice in a `chat.completion`; with `answer` (a chat's format), the text is read as
        llama.cpp reads it: reasoning_content and tool_calls split off the content."""
        message, finish = assistant_message(self.text, self.finish.reason if self.finish else None, answer)
        return {"index": self.index, "message": message,
                "logprobs": chat_logprobs(self.entries) if self.entries else None,
                "finish_reason": _reason(finish)}


def assistant_message(text: str, finish: FinishReason | None,
                      answer: AnswerFormat | None) -> tuple[ChatCompletionResponseMessage, FinishReason | None]:
    """The assistant message for generated text and its finish reason (tool_calls when the model called
    tools). An answer cut by max_tokens is read as far as it goes: a call it cut keeps its partial arguments."""
    if answer is None:
        return {"role": "assistant", "content": text}, finish
    message: Any = answer.message(text, tool_call_id, complete=finish is not FinishReason.LENGTH)
    if message.get("tool_calls") and finish is not FinishReason.LENGTH:
        finish = FinishReason.TOOL_CALLS
    return message, finish


class ChatStream:
    """Chat chunks of one choice: the role first, then deltas, then the finish.

    With `answer` (a chat's format), deltas are llama.cpp's reading of the text so far: reasoning as
    `reasoning_content`, the answer as `content`, and each tool call as a `tool_calls` delta with its
    index, id and name, then its `arguments` as they are generated. Markup that may become a tool
    call is held back until it is one or turns out not to be.
    """

    def __init__(self, envelope: Envelope, output: ChoiceOutput, answer: AnswerFormat | None) -> None:
        self.envelope, self.output = envelope, output
        self.reader = answer.reader(tool_call_id, stream=True) if answer is not None else None
        self.called = False

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
            if self.reader is not None:
                return self._delta_chunks(self.reader.push(event.text), lp)
            if not (event.text or event.logprob is not None):
                return []
            return [chunk(index, {"content": event.text}, None, lp)]
        reason = event.reason
        if self.reader is None:
            return [chunk(index, {}, reason)]
        out = self._delta_chunks(self.reader.finish(), None) if reason is not FinishReason.LENGTH else []
        if self.called and reason is not FinishReason.LENGTH:
            reason = FinishReason.TOOL_CALLS
        return [*out, chunk(index, {}, reason)]

    def _delta_chunks(self, deltas: list[Delta],
                      lp: ChatCompletionLogprobs | None) -> list[CreateChatCompletionStreamResponse]:
        """A chunk per delta; a token's logprobs go with its first (or an empty content delta)."""
        out = []
        for d in deltas:
            for delta in _openai_deltas(d):
                if "tool_calls" in delta:
                    self.called = True
                out.append(self.envelope.chat_chunk(self.output.index, delta, None, lp))
                lp = None
        if lp is not None:
            out.append(self.envelope.chat_chunk(self.output.index, {"content": ""}, None, lp))
        return out


def _openai_deltas(d: Delta) -> list[ChatCompletionStreamResponseDelta]:
    out: list[Any] = []
    if d.reasoning:
        out.append({"reasoning_content": d.reasoning})
    if d.content:
        out.append({"content": d.content})
    if d.tool_index >= 0:
        call: dict[str, Any] = {"index": d.tool_index}
        if d.tool_id or d.tool_name:
            call |= {"id": d.tool_id, "type": "function", "function": {"name": d.tool_name, "arguments": d.arguments}}
        else:
            call["function"] = {"arguments": d.arguments}
        out.append({"tool_calls": [call]})
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
    "embedding_response", "new_id", "tool_call_id", "usage",
]
