"""`Llama.create_chat_completion` (the `ChatMethods` part of Llama): the chat pipeline of
llamacore.chat run on this model, or the call handed to a llama-cpp-python `chat_handler`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from llamacore._llama.host import LlamaHost
from llamacore._llama.vision_handler import is_vision_handler
from llamacore.chat.answer import AnswerFormat
from llamacore.chat.openai import (
    ChatStream,
    ChoiceOutput,
    CreateChatCompletionResponse,
    CreateChatCompletionStreamResponse,
    Envelope,
    chat_chunks,
    usage,
)
from llamacore.chat.prompt import chat_prompt, tool_request
from llamacore.chat.reasoning import check_format
from llamacore.generation.processors import LogitsProcessor, StoppingCriteria
from llamacore.generation.sampling import SamplingParams, check_tfs_z
from llamacore.llama_grammar import LlamaGrammar
from llamacore.vision.media import image_urls
from llamacore.vision.prompt import load_images


def create_chat_completion(llm: LlamaHost, messages: list[dict[str, Any]], *, tools: list | None = None,
                           tool_choice: Any = None, functions: list | None = None, function_call: Any = None,
                           temperature: float = 0.2, stream: bool = False, stop: str | list[str] | None = None,
                           response_format: dict | None = None, grammar: str | LlamaGrammar | None = None,
                           logprobs: bool = False, top_logprobs: int | None = None,
                           max_tokens: int | None = None, model: str | None = None, ignore_eos: bool = False,
                           reasoning_format: str = "none", chat_template_kwargs: Mapping[str, Any] | None = None,
                           tfs_z: float = 1.0, logits_processor: LogitsProcessor | None = None,
                           stopping_criteria: StoppingCriteria | None = None,
                           **sampling: Any,
                           ) -> CreateChatCompletionResponse | Iterator[CreateChatCompletionStreamResponse]:
    check_format(reasoning_format)
    check_tfs_z(tfs_z)
    if functions and not tools:
        tools = [{"type": "function", "function": f} for f in functions]
        tool_choice = ({"type": "function", "function": function_call} if isinstance(function_call, dict)
                       else function_call)
    tools, choice = tool_request(tools, tool_choice)
    urls = image_urls(messages)
    images = load_images(llm.projector, urls, llm.media_policy) if urls and llm.projector is not None else None
    rendered = chat_prompt(llm.model, llm.chat_template, messages, tools, tool_choice=choice,
                           template_kwargs=chat_template_kwargs, reasoning_format=reasoning_format,
                           projector=llm.projector, images=images)
    answer = AnswerFormat(rendered.params, reasoning_format, tools=bool(tools) and choice != "none")
    user_stops = [stop] if isinstance(stop, str) else list(stop or [])
    tool = rendered.tool_grammar
    params = llm._sampling_params(temperature=temperature, response_format=response_format,
                                  grammar=grammar or (tool.grammar if tool else None), **_sampling_fields(sampling))
    if tool is not None and not grammar:        # lazy: free text until a trigger; forced: after the prefill
        params = dataclasses.replace(params, grammar_patterns=tool.patterns, grammar_tokens=tool.tokens,
                                     grammar_prefill=tool.prefill)
    events, n_prompt = llm._completion_events(rendered.tokens, params, max_tokens=max_tokens,
                                              stop=rendered.stops + user_stops, ignore_eos=ignore_eos,
                                              logprobs=(top_logprobs or 0) if logprobs else None,
                                              logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                                              stream=stream)
    envelope = Envelope.new("chatcmpl", model or llm.model_path)
    if stream:
        return chat_chunks(events, ChatStream(envelope, ChoiceOutput(), answer))
    output = ChoiceOutput()
    for event in events:
        output.add(event)
    return envelope.chat([output.chat_choice(answer)], usage(n_prompt, output.n_generated))


def _sampling_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The sampling keywords of a chat call; any other keyword is a TypeError, as for a plain function
    (it would otherwise be silently ignored)."""
    known = {f.name for f in dataclasses.fields(SamplingParams)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"create_chat_completion() got unexpected keyword argument(s): {', '.join(unknown)}")
    return kwargs


class ChatMethods(LlamaHost):
    """`Llama.create_chat_completion` and its openai-package form."""

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
            self, messages, **lcp_args, logprobs=bool(logprobs), top_logprobs=top_logprobs,
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
