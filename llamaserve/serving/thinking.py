"""A chat request's prompt on a model, with llama-server's thinking settings (llamacore.chat.reasoning)
and how its answer is read (llamacore.chat.answer).

The model entry gives `reasoning` (on/off/auto), `reasoning_format` and `chat_template_kwargs`;
a request may set its own reasoning_format, chat_template_kwargs (merged over the model's) and
reasoning_effort. Every chat-shaped route (chat completions, Anthropic messages, responses,
apply-template, token counts) renders through here, so they agree on the prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llamacore import Image, Model, Projector
from llamacore.chat.answer import AnswerFormat
from llamacore.chat.prompt import RenderedChat, chat_prompt, continues
from llamacore.chat.reasoning import check_format
from llamacore.chat.thinking import template_kwargs
from llamaserve.config.settings import ModelEntry


@dataclass(frozen=True)
class ChatInput:
    """A rendered chat prompt (text, tokens, stops, tool grammar, ...) and how its answer is read."""

    rendered: RenderedChat
    answer: AnswerFormat


def chat_input(model: Model, entry: ModelEntry, template: str, messages: list[dict[str, Any]],
               tools: list | None, tool_choice: str = "auto", *, reasoning_format: str | None = None,
               chat_template_kwargs: Mapping[str, Any] | None = None,
               reasoning_effort: str | None = None, add_generation_prompt: bool | None = None,
               continue_final_message: bool | None = None, projector: Projector | None = None,
               images: list[Image] | None = None) -> ChatInput:
    """The prompt for `messages` (ValueError for a bad template variable or a template that fails, or
    for contradicting add_generation_prompt / continue_final_message). `images`: the messages' image
    parts, loaded, for a model with a vision `projector`."""
    kwargs = kwargs_for(entry, template, chat_template_kwargs, reasoning_effort)
    add, cont = continuation(messages, add_generation_prompt, continue_final_message)
    fmt = check_format(reasoning_format or entry.reasoning_format)
    rendered = chat_prompt(model, template, messages, tools, tool_choice=tool_choice, template_kwargs=kwargs,
                           add_generation_prompt=add, continue_final_message=cont, reasoning_format=fmt,
                           projector=projector, images=images)
    answer = AnswerFormat(rendered.params, fmt, tools=bool(tools) and tool_choice != "none", continuation=cont)
    return ChatInput(rendered, answer)


def continuation(messages: list[dict[str, Any]], add_generation_prompt: bool | None,
                 continue_final_message: bool | None) -> tuple[bool, bool]:
    """(add_generation_prompt, continue_final_message) for a request. Unset, a conversation that ends with
    the assistant's text is continued (llama-server's and Ollama's prefill); vLLM's explicit pair works too."""
    if add_generation_prompt and continue_final_message:
        raise ValueError("add_generation_prompt and continue_final_message cannot both be true")
    if continue_final_message is None:
        continue_final_message = add_generation_prompt is not False and continues(messages)
    if continue_final_message and len(messages) > 1 and messages[-2].get("role") == "assistant":
        raise ValueError("the conversation ends with two assistant messages: which one to continue is unclear "
                         "(as llama-server, this is refused)")
    return (not continue_final_message if add_generation_prompt is None else add_generation_prompt,
            continue_final_message)


def kwargs_for(entry: ModelEntry, template: str, chat_template_kwargs: Mapping[str, Any] | None = None,
               reasoning_effort: str | None = None) -> dict[str, Any]:
    """The extra template variables of a request on `entry` (enable_thinking resolved)."""
    return template_kwargs(template, reasoning=entry.reasoning, defaults=entry.chat_template_kwargs,
                           request=chat_template_kwargs, reasoning_effort=reasoning_effort)


__all__ = ["ChatInput", "chat_input", "kwargs_for"]
