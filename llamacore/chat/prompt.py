"""The chat pipeline that both the server and `Llama` use: template resolution, the rendered and
tokenized prompt, structured output (`response_format` as GBNF) and the tools a request offers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llamacore.chat import tool_calls
from llamacore.chat.templates import message_text, render_chat, resolve_template
from llamacore.grammar.cache import GrammarCache, default_cache
from llamacore.vision.prompt import MEDIA_MARKER, tokenize_with_images

if TYPE_CHECKING:
    from llamacore._core import Image, Model, Projector

# End-of-turn markers that a template may write as plain text; generation stops on them.
TURN_END_MARKERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>",
                    "<|END_OF_TURN_TOKEN|>")


def resolve(model: Model, chat_format: str | None, chat_template: str | None) -> str:
    return resolve_template(chat_format, chat_template, model.chat_template())


def grammar_for(response_format: dict[str, Any] | None, *, whitespace: str = "compact",
                cache: GrammarCache | None = None) -> str | None:
    """GBNF for an OpenAI `response_format` (json_object or json_schema), None for text.

    Schemas convert through `cache` (the process-wide one by default), so a repeated schema costs
    a hash; `whitespace` is one of json_grammar.WHITESPACE.
    """
    if not response_format:
        return None
    if not isinstance(response_format, dict):
        raise ValueError("response_format must be an object")
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    compile_schema = (cache if cache is not None else default_cache()).grammar
    if kind == "json_object":
        schema = response_format.get("schema")          # llama-cpp-python's extension
        return compile_schema(schema if schema else {"type": "object"}, whitespace)
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        if not isinstance(spec, dict):
            raise ValueError("response_format.json_schema must be an object with a 'schema'")
        schema = spec.get("schema", spec if "type" in spec else None)
        if not isinstance(schema, dict):
            raise ValueError("response_format.json_schema.schema must be a JSON schema object")
        return compile_schema(schema, whitespace)
    raise ValueError(f"unsupported response_format type {kind!r} (expected text, json_object or json_schema)")


def _special_text(model: Model, token: int) -> str:
    return model.token_to_piece(token, True).decode("utf-8", "replace") if token >= 0 else ""


def prompt_text(model: Model, template: str, messages: list[dict[str, Any]], tools: list | None,
                add_generation_prompt: bool = True, *, template_kwargs: Mapping[str, Any] | None = None,
                continue_final_message: bool = False, media_marker: str | None = None) -> str:
    """The prompt `template` renders for `messages`, ending with the assistant's turn opened (unless
    `add_generation_prompt` is false); `template_kwargs` are extra template variables (enable_thinking, ...).

    With `continue_final_message` the last message (the assistant's) is not closed: the prompt is the
    conversation before it with the assistant's turn opened, then its text, which the model continues
    (a "prefill", as llama-server, Ollama and Anthropic's API do it).
    """
    if not messages:
        raise ValueError("messages must contain at least one message")
    bos, eos = _special_text(model, model.token_bos), _special_text(model, model.token_eos)
    if continue_final_message:
        if not continues(messages):
            raise ValueError("continue_final_message needs a last message from the assistant with text")
        prefix = render_chat(template, messages[:-1], bos_token=bos, eos_token=eos, add_generation_prompt=True,
                             tools=tools, media_marker=media_marker, **dict(template_kwargs or {}))
        return prefix + message_text(messages[-1])
    return render_chat(template, messages, bos_token=bos, eos_token=eos, add_generation_prompt=add_generation_prompt,
                       tools=tools, media_marker=media_marker, **dict(template_kwargs or {}))


def continues(messages: list[dict[str, Any]]) -> bool:
    """Whether the conversation ends with an assistant message that can be continued (text, no tool calls)."""
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("tool_calls") and bool(message_text(last))


def prompt_tokens(model: Model, template: str, messages: list[dict[str, Any]], tools: list | None, *,
                  template_kwargs: Mapping[str, Any] | None = None) -> tuple[list[int], list[str]]:
    """Rendered, tokenized prompt and the stop strings the template implies."""
    _, tokens, stops = chat_prompt(model, template, messages, tools, template_kwargs=template_kwargs)
    return tokens, stops


def chat_prompt(model: Model, template: str, messages: list[dict[str, Any]], tools: list | None, *,
                template_kwargs: Mapping[str, Any] | None = None, add_generation_prompt: bool = True,
                continue_final_message: bool = False, projector: Projector | None = None,
                images: list[Image] | None = None) -> tuple[str, list[int], list[str]]:
    """The rendered prompt, its tokens and the stop strings the template implies.

    `images` (with their `projector`) are the image parts of `messages` in order, already loaded;
    the tokens are then MediaTokens (llamacore.vision.prompt).
    """
    text = prompt_text(model, template, messages, tools, add_generation_prompt, template_kwargs=template_kwargs,
                       continue_final_message=continue_final_message,
                       media_marker=MEDIA_MARKER if projector is not None else None)
    if projector is not None:
        tokens: list[int] = tokenize_with_images(projector, model, text, images or [])
    else:
        tokens = model.tokenize(text, add_special=False, parse_special=True)
        if model.add_bos and (not tokens or tokens[0] != model.token_bos):
            tokens.insert(0, model.token_bos)
    stops = [m for m in TURN_END_MARKERS if m in template]
    return text, tokens, stops


def tool_setup(template: str, tools: list | None, tool_choice: Any) -> tuple[list | None, str | None]:
    """Tools to render and a grammar that forces a call when tool_choice demands one."""
    if not tools or tool_choice == "none":
        return (None if tool_choice == "none" else tools), None
    style = tool_calls.style_for(template)
    if tool_choice == "required":
        _tool_functions(tools)
        return tools, tool_calls.forcing_grammar(tools, style)
    if isinstance(tool_choice, dict):
        functions = _tool_functions(tools)
        chosen_fn = tool_choice.get("function")
        name = chosen_fn.get("name") if isinstance(chosen_fn, dict) else None
        chosen = [t for t, fn in zip(tools, functions) if fn["name"] == name]
        if not chosen:
            raise ValueError(f"tool_choice names function {name!r}, which is not among the tools")
        return tools, tool_calls.forcing_grammar(chosen, style)
    return tools, None


def _tool_functions(tools: list) -> list[dict[str, Any]]:
    """The function of each tool, checked enough to build a grammar from (ValueError otherwise)."""
    functions = []
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"tools[{i}] must be an object with a function that has a name")
        if not isinstance(fn.get("parameters") or {}, dict):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema object")
        functions.append(fn)
    return functions


__all__ = ["TURN_END_MARKERS", "chat_prompt", "continues", "grammar_for", "prompt_text", "prompt_tokens", "resolve",
           "tool_setup"]
