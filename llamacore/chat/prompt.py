"""The chat pipeline that both the server and `Llama` use: template resolution, the prompt rendered by
llama.cpp's chat layer and tokenized, the tool-call grammar with its triggers, and structured output
(`response_format` as GBNF)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from llamacore._core import ChatParams, regex_escape
from llamacore.chat import native
from llamacore.chat.templates import message_text, resolve_template
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


@dataclass(frozen=True)
class ToolGrammar:
    """The grammar that constrains a model's tool calls, as llama.cpp builds it for the template: lazy
    (free text until a trigger pattern matches or a trigger token is sampled) unless a call is forced."""

    grammar: str
    patterns: tuple[str, ...] = ()
    tokens: tuple[int, ...] = ()
    prefill: tuple[int, ...] = ()      # the generation prompt, which a forced grammar begins with

    @property
    def lazy(self) -> bool:
        return bool(self.patterns or self.tokens)


@dataclass(frozen=True)
class RenderedChat:
    """A rendered chat: its text and tokens, the stop strings it implies, the special tokens its answer
    keeps as text, the tool-call grammar (None without one) and llama.cpp's params for reading the answer."""

    text: str
    tokens: list[int]
    stops: list[str]
    preserved: frozenset[int]
    tool_grammar: ToolGrammar | None
    params: ChatParams


def continues(messages: list[dict[str, Any]]) -> bool:
    """Whether the conversation ends with an assistant message that can be continued (text, no tool calls)."""
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("tool_calls") and bool(message_text(last))


def chat_prompt(model: Model, template: str, messages: list[dict[str, Any]], tools: list | None, *,
                tool_choice: str = "auto", template_kwargs: Mapping[str, Any] | None = None,
                add_generation_prompt: bool = True, continue_final_message: bool = False,
                reasoning_format: str = "auto", parallel_tool_calls: bool | None = None,
                projector: Projector | None = None, images: list[Image] | None = None) -> RenderedChat:
    """`messages` rendered by llama.cpp's chat layer with `tools` offered (llamacore.chat.native), and tokenized.

    With `continue_final_message` the last message (the assistant's) is left open for the model to
    continue (a "prefill", as llama-server, Ollama and Anthropic's API do it). `images` (with their
    `projector`) are the image parts of `messages` in order, already loaded; the tokens are then
    MediaTokens (llamacore.vision.prompt). ValueError when the template or messages cannot be used.
    """
    if not messages:
        raise ValueError("messages must contain at least one message")
    if continue_final_message and not continues(messages):
        raise ValueError("continue_final_message needs a last message from the assistant with text")
    templates = native.for_model(model, template)
    if tools and tool_choice != "none" and not templates.caps["supports_tool_calls"]:
        raise ValueError("this model's chat template cannot call tools (llama.cpp finds no tool-call format in it): "
                         "give the model a template that can (chat_template_file, e.g. one of llama.cpp's "
                         "models/templates), or send tool_choice 'none'")
    params = native.render(templates, messages, tools=tools, tool_choice=tool_choice,
                           parallel_tool_calls=parallel_tool_calls, add_generation_prompt=add_generation_prompt,
                           continue_final_message=continue_final_message, template_kwargs=template_kwargs,
                           reasoning_format=reasoning_format,
                           media_marker=MEDIA_MARKER if projector is not None else None)
    text = params.prompt
    if projector is not None:
        tokens: list[int] = tokenize_with_images(projector, model, text, images or [])
    else:
        tokens = model.tokenize(text, add_special=False, parse_special=True)
        if model.add_bos and (not tokens or tokens[0] != model.token_bos):
            tokens.insert(0, model.token_bos)
    stops = _turn_ends(template) + params.additional_stops
    preserved = frozenset(t for t in map(partial(_single_token, model), params.preserved_tokens) if t is not None)
    return RenderedChat(text, tokens, list(dict.fromkeys(stops)), preserved,
                        _tool_grammar(model, params, preserved, tokens), params)


def _turn_ends(template: str) -> list[str]:
    """The end-of-turn markers `template` writes; gpt-oss's `<|end|>` ends a channel, not the answer
    (llama.cpp's vocabulary drops it from the end-of-generation tokens where <|return|> and <|call|> exist)."""
    ends = [m for m in TURN_END_MARKERS if m in template]
    return [m for m in ends if m != "<|end|>"] if "<|return|>" in template and "<|call|>" in template else ends


def _single_token(model: Model, text: str) -> int | None:
    ids = model.tokenize(text, add_special=False, parse_special=True)
    return ids[0] if len(ids) == 1 else None


def _prefill(model: Model, generation_prompt: str, prompt: list[int]) -> tuple[int, ...]:
    """The generation prompt's tokens for a chat grammar to take first: the prompt's own last tokens when
    they spell it exactly (a SentencePiece vocabulary tokenizes it alone with a leading space), else as
    llama.cpp's sampler makes them (common/sampling.cpp: tokenized alone, a leading space piece left out)."""
    if not generation_prompt:
        return ()
    wanted, tail, taken = generation_prompt.encode(), b"", 0
    if isinstance(prompt, list):
        while len(tail) < len(wanted) and taken < len(prompt):
            taken += 1
            tail = model.token_to_piece(prompt[-taken], True) + tail
        if tail == wanted:
            return tuple(prompt[-taken:])
    tokens = model.tokenize(generation_prompt, add_special=False, parse_special=True)
    if tokens and model.token_to_piece(tokens[0], True)[:1].isspace() and not generation_prompt[:1].isspace():
        tokens = tokens[1:]
    return tuple(tokens)


def _tool_grammar(model: Model, params: ChatParams, preserved: frozenset[int], prompt: list[int]) -> ToolGrammar | None:
    """llama.cpp's triggers as the sampler takes them (common/sampling.cpp, llama-server's schema):
    a trigger word that is one preserved token triggers on that token, other words as escaped patterns."""
    if not params.grammar:
        return None
    if not params.grammar_lazy:
        return ToolGrammar(params.grammar, prefill=_prefill(model, params.generation_prompt, prompt))
    patterns: list[str] = []
    tokens: list[int] = []
    for kind, value, token in params.grammar_triggers:
        if kind == "word":
            single = _single_token(model, value)
            if single is not None and single in preserved:
                tokens.append(single)
            else:
                patterns.append(regex_escape(value))
        elif kind == "pattern":
            patterns.append(value)
        elif kind == "pattern_full":
            patterns.append(("" if value.startswith("^") else "^") + value + ("" if value.endswith("$") else "$")
                            if value else "^$")
        else:
            tokens.append(token)
    if not patterns and not tokens:
        raise ValueError("the template's tool-call grammar is lazy but has no triggers")
    return ToolGrammar(params.grammar, tuple(patterns), tuple(tokens))


def tool_request(tools: list | None, tool_choice: Any) -> tuple[list | None, str]:
    """The tools to render and llama.cpp's tool_choice (auto, required or none) for an OpenAI request:
    a named function ({"type": "function", "function": {"name": ...}}) offers that tool alone, required."""
    if tool_choice is None:
        tool_choice = "auto"
    if not tools:
        if tool_choice not in ("auto", "none"):
            raise ValueError("tool_choice needs tools")
        return None, "none"
    functions = _tool_functions(tools)
    if isinstance(tool_choice, dict):
        chosen_fn = tool_choice.get("function")
        name = chosen_fn.get("name") if isinstance(chosen_fn, dict) else None
        chosen = [t for t, fn in zip(tools, functions) if fn["name"] == name]
        if not chosen:
            raise ValueError(f"tool_choice names function {name!r}, which is not among the tools")
        return chosen, "required"
    if tool_choice not in ("auto", "required", "none"):
        raise ValueError(f"tool_choice must be auto, required, none or a function, not {tool_choice!r}")
    return tools, tool_choice


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


__all__ = ["TURN_END_MARKERS", "RenderedChat", "ToolGrammar", "chat_prompt", "continues", "grammar_for", "resolve",
           "tool_request"]
