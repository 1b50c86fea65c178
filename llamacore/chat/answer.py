"""A model's answer read as llama.cpp reads it: content, reasoning_content and tool calls.

The template's format (llamacore.chat.native) comes with llama.cpp's parser for it: Hermes and
Qwen `<tool_call>` JSON, Qwen3-Coder XML, Llama 3.x, Mistral and Devstral `[TOOL_CALLS]`, gpt-oss
channels, DeepSeek V3.x, Kimi, GLM, MiniMax, Gemma, Granite, Command-R, Functionary and the rest.
The parser reads partial text as it streams: a tool call shows first as its id and name, then its
arguments as they are generated, and markup that may still become a tool call is held back, never
sent as content. A finished answer that does not match the format is all content, never half read.

`reasoning_format` (llama-server's): none leaves thinking in the content; auto and deepseek move
it to reasoning_content; deepseek-legacy also keeps it inline in a stream's content.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from llamacore._core import ChatParams, ChatParser


class Delta(NamedTuple):
    """One change to the answer: text added to its reasoning or content, or to tool call `tool_index`
    (its id and name the first time, then pieces of its arguments' JSON)."""

    reasoning: str
    content: str
    tool_index: int         # -1: not a tool call's
    tool_id: str
    tool_name: str
    arguments: str


@dataclass(frozen=True)
class AnswerFormat:
    """How the answers to one rendered chat are read: the template's parser (`params`), the
    request's reasoning_format, whether tools were offered (tool calls are parsed only then) and
    whether the prompt continues the assistant's last message."""

    params: ChatParams
    reasoning_format: str = "auto"
    tools: bool = False
    continuation: bool = False

    def reader(self, new_id: Callable[[], str], *, separate_reasoning: bool = False,
               stream: bool = False) -> AnswerReader:
        """A reader for one answer. `separate_reasoning`: reasoning always in its own deltas (APIs
        with thinking blocks of their own); `stream`: deepseek-legacy keeps it inline in content."""
        fmt = self.reasoning_format
        if separate_reasoning and fmt == "deepseek-legacy":
            fmt = "deepseek"
        return AnswerReader(ChatParser(self.params, reasoning_format=fmt, parse_tool_calls=self.tools,
                                       continuation=self.continuation, new_id=new_id),
                            inline_reasoning=stream and fmt == "deepseek-legacy")

    def message(self, text: str, new_id: Callable[[], str], *, complete: bool = True) -> dict[str, Any]:
        """The assistant message of an answer: role, content (None when there is none beside tool
        calls), reasoning_content when there was any, tool_calls when the model made any. An answer
        that is not `complete` (cut by max_tokens) is read as far as it goes, as while streaming."""
        reader = self.reader(new_id)
        reader.push(text)
        if complete:
            reader.finish()
        return reader.message


class AnswerReader:
    """Reads one answer as it is generated: push() and finish() give the Deltas to send."""

    def __init__(self, parser: ChatParser, inline_reasoning: bool = False) -> None:
        self.parser = parser
        self.inline_reasoning = inline_reasoning
        self._thinking = False

    def push(self, text: str) -> list[Delta]:
        return self._inline(self.parser.update(text)) if text else []

    def finish(self) -> list[Delta]:
        return self._inline(self.parser.finish()) + self._close_inline()

    @property
    def failed(self) -> bool:
        """Whether the finished answer did not match the format (it is then all content)."""
        return self.parser.failed

    @property
    def message(self) -> dict[str, Any]:
        message = self.parser.message
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or None}
        if message.get("reasoning_content"):
            out["reasoning_content"] = message["reasoning_content"]
        if message.get("tool_calls"):
            out["tool_calls"] = [{"id": c.get("id", ""), "type": "function",
                                  "function": {"name": c["function"]["name"],
                                               "arguments": c["function"]["arguments"]}}
                                 for c in message["tool_calls"]]
        elif out["content"] is None:
            out["content"] = ""
        return out

    def _inline(self, raw: list[tuple[str, str, int, str, str, str]]) -> list[Delta]:
        deltas = [Delta(*d) for d in raw]
        if not self.inline_reasoning:
            return deltas
        out = []
        for d in deltas:          # deepseek-legacy in a stream: the thinking block inline, tags and all
            if d.reasoning:
                opening = "" if self._thinking else "<think>"
                self._thinking = True
                out.append(d._replace(reasoning="", content=opening + d.reasoning + d.content))
                continue
            if self._thinking and (d.content or d.tool_index >= 0):
                self._thinking = False
                d = d._replace(content="</think>" + d.content)
            out.append(d)
        return out

    def _close_inline(self) -> list[Delta]:
        if self._thinking:
            self._thinking = False
            return [Delta("", "</think>", -1, "", "", "")]
        return []


def text_parts(deltas: list[Delta]) -> list[tuple[str, str]]:
    """The reasoning and content text of `deltas` as (kind, text) parts, kind "reasoning" or "content"."""
    out = []
    for d in deltas:
        if d.reasoning:
            out.append(("reasoning", d.reasoning))
        if d.content:
            out.append(("content", d.content))
    return out


__all__ = ["AnswerFormat", "AnswerReader", "Delta", "text_parts"]
