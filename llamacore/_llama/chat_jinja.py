"""llama-cpp-python's formatter types and its formatters from a Jinja chat template:
`Jinja2ChatFormatter`, `hf_tokenizer_config_to_chat_formatter` (a tokenizer_config.json's template)
and `hf_autotokenizer_to_chat_formatter`. They render in llamacore's sandbox
(llamacore.chat.templates.render_chat); the named formats are in llamacore._llama.chat_formatters.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from llamacore._llama.host import LlamaHost
from llamacore.chat.openai import ChatStream, ChoiceOutput, Envelope, chat_chunks, usage
from llamacore.chat.templates import _compile, render_chat
from llamacore.generation.processors import StoppingCriteriaList
from llamacore.generation.sampling import SamplingParams, check_tfs_z

__all__ = ["ChatFormatter", "ChatFormatterResponse", "Jinja2ChatFormatter", "Messages",
           "hf_autotokenizer_to_chat_formatter", "hf_tokenizer_config_to_chat_formatter"]

log = logging.getLogger(__name__)

Messages = Sequence[Mapping[str, Any]]


@dataclasses.dataclass
class ChatFormatterResponse:
    """A formatted prompt, the stop string(s) its format implies, optional stopping criteria, and
    whether the prompt already holds the BOS text (then tokenize it without adding one)."""

    prompt: str
    stop: str | list[str] | None = None
    stopping_criteria: StoppingCriteriaList | None = None
    added_special: bool = False


class ChatFormatter(Protocol):
    def __call__(self, *, messages: Messages, **kwargs: Any) -> ChatFormatterResponse: ...


class Jinja2ChatFormatter:
    """A HuggingFace-style Jinja chat template as a ChatFormatter; the prompt stops at `eos_token`,
    and, given `stop_token_ids`, when the last token of the context is one of them."""

    def __init__(self, template: str, eos_token: str, bos_token: str, add_generation_prompt: bool = True,
                 stop_token_ids: list[int] | None = None) -> None:
        self.template = template
        self.eos_token = eos_token
        self.bos_token = bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = set(stop_token_ids) if stop_token_ids is not None else None
        _compile(template)                      # a broken template fails here, not at the first call

    def __call__(self, *, messages: Messages, functions: list | None = None, function_call: Any = None,
                 tools: list | None = None, tool_choice: Any = None, **kwargs: Any) -> ChatFormatterResponse:
        prompt = render_chat(self.template, [dict(m) for m in messages], bos_token=self.bos_token,
                             eos_token=self.eos_token, add_generation_prompt=self.add_generation_prompt,
                             tools=tools, functions=functions, function_call=function_call,
                             tool_choice=tool_choice, **kwargs)
        criteria = None
        if self.stop_token_ids is not None:
            stop_ids = self.stop_token_ids

            def last_token_stops(tokens: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
                return len(tokens) > 0 and int(tokens[-1]) in stop_ids

            criteria = StoppingCriteriaList([last_token_stops])
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token], stopping_criteria=criteria,
                                     added_special=True)

    def to_chat_handler(self) -> Callable[..., Any]:
        return chat_formatter_to_chat_completion_handler(self)


def _token_text(config: Mapping[str, Any], name: str) -> str:
    """A special token of a tokenizer_config.json: a string, or an AddedToken object with 'content'."""
    value = config.get(name)
    if isinstance(value, Mapping):
        value = value.get("content")
    if not isinstance(value, str):
        raise ValueError(f"tokenizer_config needs {name!r} as a string (or an object with 'content')")
    return value


def hf_tokenizer_config_to_chat_formatter(tokenizer_config: dict[str, Any],
                                          add_generation_prompt: bool = True) -> ChatFormatter:
    """A formatter from a HuggingFace tokenizer_config.json (its chat_template, bos_token, eos_token).

    As llama-cpp-python's: the template is rendered without `add_generation_prompt` set, and
    `add_generation_prompt` appends an empty assistant message to the conversation instead.
    """
    if not isinstance(tokenizer_config, dict):
        raise ValueError("tokenizer_config must be a dict (the parsed tokenizer_config.json)")
    template = tokenizer_config.get("chat_template")
    if not isinstance(template, str):
        raise ValueError("tokenizer_config needs a 'chat_template' string")
    bos, eos = _token_text(tokenizer_config, "bos_token"), _token_text(tokenizer_config, "eos_token")
    _compile(template)

    def format_tokenizer_config(*, messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
        turns = [dict(m) for m in messages]
        if add_generation_prompt:
            turns.append({"role": "assistant", "content": ""})
        generation = kwargs.pop("add_generation_prompt", False)
        prompt = render_chat(template, turns, bos_token=bos, eos_token=eos, add_generation_prompt=generation,
                             **kwargs)
        return ChatFormatterResponse(prompt=prompt, stop=[eos, bos], added_special=True)

    return format_tokenizer_config


def hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path: Any) -> ChatFormatter:
    """A formatter using `transformers.AutoTokenizer.from_pretrained(...).apply_chat_template`."""
    from llamacore.llama_tokenizer import auto_tokenizer

    tokenizer = auto_tokenizer().from_pretrained(pretrained_model_name_or_path)

    def format_autotokenizer(*, messages: Messages, **kwargs: Any) -> ChatFormatterResponse:
        tokenizer.use_default_system_prompt = False
        prompt = tokenizer.apply_chat_template(list(messages), tokenize=False, **kwargs)
        if not isinstance(prompt, str):
            raise TypeError(f"apply_chat_template returned {type(prompt).__name__}, expected str")
        return ChatFormatterResponse(prompt=prompt, stop=tokenizer.eos_token, added_special=True)

    return format_autotokenizer


class LlamaChatCompletionHandler(Protocol):
    """Runs a chat completion on `llama`: a chat.completion, or an iterator of chunks when streaming."""

    def __call__(self, *, llama: LlamaHost, messages: Messages, **kwargs: Any) -> Any: ...


def chat_formatter_to_chat_completion_handler(chat_formatter: ChatFormatter) -> LlamaChatCompletionHandler:
    """A handler that completes the prompt `chat_formatter` writes, stopping at its stop strings.

    Sampling keywords go to the completion; any other keyword is a template variable for the formatter.
    """
    def chat_completion_handler(*, llama: LlamaHost, messages: Messages, functions: list | None = None,
                                function_call: Any = None, tools: list | None = None, tool_choice: Any = None,
                                temperature: float = 0.2, stream: bool = False, stop: str | list[str] | None = None,
                                max_tokens: int | None = None, model: str | None = None,
                                response_format: dict | None = None, grammar: Any = None,
                                logprobs: bool | None = None, top_logprobs: int | None = None,
                                logits_processor: Any = None, tfs_z: float = 1.0, **kwargs: Any) -> Any:
        check_tfs_z(tfs_z)
        if isinstance(tool_choice, dict) or isinstance(function_call, dict):
            raise ValueError("a chat format handler cannot force a tool call; use Llama.create_chat_completion, "
                             "which follows the model's template for tools")
        fields = {f.name for f in dataclasses.fields(SamplingParams)} - {"grammar"}
        sampling = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
        result = chat_formatter(messages=messages, functions=functions, function_call=function_call, tools=tools,
                                tool_choice=tool_choice, **kwargs)
        tokens = llama.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if result.stop is not None:
            stops += [result.stop] if isinstance(result.stop, str) else list(result.stop)
        params = llama._sampling_params(temperature=temperature, response_format=response_format, grammar=grammar,
                                        **sampling)
        events, n_prompt = llama._completion_events(tokens, params, max_tokens=max_tokens, stop=stops,
                                                    logprobs=(top_logprobs or 0) if logprobs else None,
                                                    logits_processor=logits_processor,
                                                    stopping_criteria=result.stopping_criteria, stream=stream)
        envelope = Envelope.new("chatcmpl", model or llama.model_path)
        if stream:
            chunks: Iterator[Any] = chat_chunks(events, ChatStream(envelope, ChoiceOutput(), None))
            return chunks
        output = ChoiceOutput()
        for event in events:
            output.add(event)
        return envelope.chat([output.chat_choice(None)], usage(n_prompt, output.n_generated))

    return chat_completion_handler
