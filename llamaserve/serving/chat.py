"""A chat request's prompt on its loaded model, prepared once for every chat-shaped route.

Chat completions, Anthropic's messages (and their token counts) and the Responses API differ in
their shapes only: each turns its request into chat messages, tools and a tool choice, then runs
the same steps here (the alias's template, the tools it renders and the grammar a forced call
needs, the messages' images, the rendered and tokenized prompt with its thinking settings), so
they agree on the prompt a model sees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llamacore.chat.answer import AnswerFormat
from llamacore.chat.prompt import ToolGrammar, tool_request
from llamacore.generation.sampling import SamplingParams
from llamaserve.config.settings import ModelEntry, ServerConfig
from llamaserve.models.loaded import Loaded
from llamaserve.serving.thinking import chat_input
from llamaserve.serving.vision import load_message_images, prompt_off_loop


class ToolsRefused(ValueError):
    """The request's tools or tool_choice cannot be used (an API may name its own field for it)."""


@dataclass(frozen=True)
class ChatPrompt:
    """A chat request's prompt: the template it rendered with, the tools rendered into it, the grammar
    of the model's tool calls, its tokens, the stop strings, the special tokens the answer keeps as
    text, and how the answer is read (content, reasoning, tool calls)."""

    template: str
    tools: list | None
    tool_grammar: ToolGrammar | None
    tokens: list[int]
    stops: list[str]
    preserved: frozenset[int]
    answer: AnswerFormat

    def sampling(self, base: SamplingParams) -> SamplingParams:
        """`base` with the tool-call grammar. A request's own grammar (or response_format) replaces a lazy
        tool grammar (calls are then still read, not constrained); with a forced call, ValueError."""
        tool = self.tool_grammar
        if tool is None:
            return base
        if base.grammar:
            if not tool.lazy:
                raise ValueError("grammar cannot be combined with a tool_choice that forces a call")
            return base
        return dataclasses.replace(base, grammar=tool.grammar, grammar_patterns=tool.patterns,
                                   grammar_tokens=tool.tokens, grammar_prefill=tool.prefill)


async def prepare_chat(config: ServerConfig, loaded: Loaded, entry: ModelEntry, messages: list[dict[str, Any]],
                       tools: list | None, tool_choice: Any, *, reasoning_format: str | None = None,
                       chat_template_kwargs: Mapping[str, Any] | None = None, reasoning_effort: str | None = None,
                       add_generation_prompt: bool | None = None,
                       continue_final_message: bool | None = None) -> ChatPrompt:
    """The prompt of `messages` on the loaded base of `entry`. ToolsRefused for unusable tools, another
    ValueError (MediaError included) for messages, images or template variables that cannot be used."""
    template = loaded.chat_template(entry)
    try:
        rendered_tools, choice = tool_request(tools, tool_choice)
    except ValueError as exc:
        raise ToolsRefused(str(exc)) from None
    engine_projector = loaded.engine.projector if loaded.engine is not None else None
    projector, images = await load_message_images(config, engine_projector, entry.alias, messages)
    prompt = await prompt_off_loop(
        chat_input, loaded.model, entry, template, messages, rendered_tools, choice,
        reasoning_format=reasoning_format, chat_template_kwargs=chat_template_kwargs,
        reasoning_effort=reasoning_effort, add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message, projector=projector, images=images)
    rendered = prompt.rendered
    return ChatPrompt(template, rendered_tools, rendered.tool_grammar, rendered.tokens, rendered.stops,
                      rendered.preserved, prompt.answer)


__all__ = ["ChatPrompt", "ToolsRefused", "prepare_chat"]
