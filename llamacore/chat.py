"""Chat completions on top of `Llama`: template rendering, structured output and tool calls."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from llamacore import tool_calls
from llamacore.chat_format import message_text, render_chat, resolve_template
from llamacore.events import TextEvent
from llamacore.grammar_cache import GrammarCache, default_cache
from llamacore.llama_grammar import LlamaGrammar
from llamacore.llama_options import is_vision_handler
from llamacore.media import image_urls
from llamacore.multimodal import MEDIA_MARKER, load_images, tokenize_with_images
from llamacore.processors import LogitsProcessor, StoppingCriteria
from llamacore.reasoning import Reasoning, check_format
from llamacore.responses import (
    ChatStream,
    ChoiceOutput,
    CreateChatCompletionResponse,
    CreateChatCompletionStreamResponse,
    Envelope,
    usage,
)
from llamacore.sampling import SamplingParams, check_tfs_z

if TYPE_CHECKING:
    from llamacore._core import Image, Model, Projector
    from llamacore.llama import Llama

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
    the tokens are then MediaTokens (llamacore.multimodal).
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


def create_chat_completion(llm: Llama, messages: list[dict[str, Any]], *, tools: list | None = None,
                           tool_choice: Any = None, functions: list | None = None, function_call: Any = None,
                           temperature: float = 0.2, stream: bool = False, stop: str | list[str] | None = None,
                           response_format: dict | None = None, grammar: str | LlamaGrammar | None = None,
                           logprobs: bool = False, top_logprobs: int | None = None,
                           max_tokens: int | None = None, model: str | None = None, ignore_eos: bool = False,
                           reasoning_format: str = "none", chat_template_kwargs: Mapping[str, Any] | None = None,
                           tfs_z: float = 1.0, logits_processor: LogitsProcessor | None = None,
                           stopping_criteria: StoppingCriteria | None = None,
                           **sampling: Any) -> CreateChatCompletionResponse | Iterator[CreateChatCompletionStreamResponse]:
    check_format(reasoning_format)
    check_tfs_z(tfs_z)
    if functions and not tools:
        tools = [{"type": "function", "function": f} for f in functions]
        tool_choice = ({"type": "function", "function": function_call} if isinstance(function_call, dict)
                       else function_call)
    tools, tool_grammar = tool_setup(llm.chat_template, tools, tool_choice)
    urls = image_urls(messages)
    images = load_images(llm.projector, urls, llm.media_policy) if urls and llm.projector is not None else None
    text, tokens, template_stops = chat_prompt(llm.model, llm.chat_template, messages, tools,
                                               template_kwargs=chat_template_kwargs, projector=llm.projector,
                                               images=images)
    reasoning = Reasoning.for_prompt(llm.chat_template, text, reasoning_format)
    user_stops = [stop] if isinstance(stop, str) else list(stop or [])
    params = llm._sampling_params(temperature=temperature, response_format=response_format,
                                  grammar=grammar or tool_grammar, **_sampling_fields(sampling))
    events, n_prompt = llm._completion_events(tokens, params, max_tokens=max_tokens,
                                              stop=template_stops + user_stops, ignore_eos=ignore_eos,
                                              logprobs=(top_logprobs or 0) if logprobs else None,
                                              logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                                              stream=stream)
    envelope = Envelope.new("chatcmpl", model or llm.model_path)
    style = tool_calls.style_for(llm.chat_template) if tools else None
    if stream:
        return _chat_chunks(events, ChatStream(envelope, ChoiceOutput(), style, reasoning))
    output = ChoiceOutput()
    for event in events:
        output.add(event)
    return envelope.chat([output.chat_choice(style, reasoning)], usage(n_prompt, output.n_generated))


def _sampling_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The sampling keywords of a chat call; any other keyword is a TypeError, as for a plain function
    (it would otherwise be silently ignored)."""
    known = {f.name for f in dataclasses.fields(SamplingParams)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"create_chat_completion() got unexpected keyword argument(s): {', '.join(unknown)}")
    return kwargs


def _chat_chunks(events: Iterator[TextEvent], stream: ChatStream) -> Iterator[CreateChatCompletionStreamResponse]:
    yield stream.start()
    for event in events:
        yield from stream.push(event)


__all__ = ["chat_prompt", "create_chat_completion", "grammar_for", "prompt_tokens", "resolve", "tool_setup"]


class ChatMethods:
    """`Llama.create_chat_completion` and its openai-package form."""

    if TYPE_CHECKING:       # provided by Llama
        chat_handler: Any

    def create_chat_completion(
            self, messages: list[dict[str, Any]], functions: list[dict[str, Any]] | None = None,
            function_call: str | dict[str, Any] | None = None, tools: list[dict[str, Any]] | None = None,
            tool_choice: str | dict[str, Any] | None = None, temperature: float = 0.2, top_p: float = 0.95,
            top_k: int = 40, min_p: float = 0.05, typical_p: float = 1.0, stream: bool = False,
            stop: str | list[str] | None = None, seed: int | None = None, response_format: dict | None = None,
            max_tokens: int | None = None, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
            repeat_penalty: float = 1.0, tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_tau: float = 5.0,
            mirostat_eta: float = 0.1, model: str | None = None, logits_processor: LogitsProcessor | None = None,
            grammar: str | LlamaGrammar | None = None, logit_bias: dict[int, float] | None = None,
            logprobs: bool | None = None, top_logprobs: int | None = None, *,
            stopping_criteria: StoppingCriteria | None = None, ignore_eos: bool = False,
            reasoning_format: str = "none", chat_template_kwargs: Mapping[str, Any] | None = None, **kwargs: Any):
        """OpenAI-style chat completion rendered through the model's chat template (or handed to a
        callable `chat_handler`, as llama-cpp-python does). Besides llama-cpp-python's parameters:
        `stopping_criteria`, `ignore_eos`, `reasoning_format` ("none", "deepseek", ...: the model's
        thinking in `reasoning_content`), `chat_template_kwargs` (extra template variables) and
        further SamplingParams fields such as `penalty_last_n`; any other keyword is a TypeError."""
        lcp_args: dict[str, Any] = {
            "functions": functions, "function_call": function_call, "tools": tools, "tool_choice": tool_choice,
            "temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p, "typical_p": typical_p,
            "stream": stream, "stop": stop, "seed": seed, "response_format": response_format,
            "max_tokens": max_tokens, "presence_penalty": presence_penalty, "frequency_penalty": frequency_penalty,
            "repeat_penalty": repeat_penalty, "tfs_z": tfs_z, "mirostat_mode": mirostat_mode,
            "mirostat_tau": mirostat_tau, "mirostat_eta": mirostat_eta, "model": model,
            "logits_processor": logits_processor, "grammar": grammar, "logit_bias": logit_bias}
        handler = self.chat_handler
        if handler is not None and callable(handler) and not is_vision_handler(handler):
            extras = {"stopping_criteria": stopping_criteria, "ignore_eos": ignore_eos or None,
                      "reasoning_format": None if reasoning_format == "none" else reasoning_format,
                      "chat_template_kwargs": chat_template_kwargs, **kwargs}
            given = sorted(name for name, value in extras.items() if value is not None)
            if given:
                raise ValueError(f"{', '.join(given)}: not available with a custom chat_handler "
                                 "(it takes llama-cpp-python's parameters only)")
            return handler(llama=self, messages=messages, **lcp_args, logprobs=logprobs, top_logprobs=top_logprobs)
        return create_chat_completion(
            cast("Llama", self), messages, **lcp_args, logprobs=bool(logprobs), top_logprobs=top_logprobs,
            stopping_criteria=stopping_criteria, ignore_eos=ignore_eos, reasoning_format=reasoning_format,
            chat_template_kwargs=chat_template_kwargs, **kwargs)

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any) -> Any:
        """`create_chat_completion` as the `openai` package's ChatCompletion (or an iterator of
        ChatCompletionChunk with stream=True); needs `pip install openai`."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError as exc:
            raise ImportError("To use create_chat_completion_openai_v1, you must install the openai package: "
                              "pip install openai") from exc
        stream = kwargs.get("stream", False)
        if not isinstance(stream, bool):
            raise TypeError("stream must be a bool")
        result = self.create_chat_completion(*args, **kwargs)
        if stream:
            return (ChatCompletionChunk(**chunk) for chunk in result)
        return ChatCompletion(**result)
