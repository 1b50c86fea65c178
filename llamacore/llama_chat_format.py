"""llama-cpp-python's `llama_chat_format` module, for drop-in use: chat formatters (by name and from
Jinja templates), the registry of chat completion handlers, and the vision chat handlers
(`Llama(model_path, chat_handler=Llava15ChatHandler(clip_model_path=...))`).

In llama-cpp-python a vision handler owns the projector and the prompt format. Here `Llama` loads
the projector itself (llamacore.Projector, one per model) and renders images like any other part
of a chat, so a handler only names the projector file and, for LLaVA-1.5, its prompt format.

The formatters live in llamacore.llama_chat_formatters; each named one is registered here as a
handler (`get_chat_completion_handler("chatml")`), which runs a completion on a `Llama` with the
prompt the formatter writes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, Self

from llamacore.chat_format import TEMPLATES
from llamacore.llama_chat_formatters import (
    ChatFormatter,
    ChatFormatterResponse,
    FORMATTERS,
    Jinja2ChatFormatter,
    Messages,
    hf_autotokenizer_to_chat_formatter,
    hf_tokenizer_config_to_chat_formatter,
    format_alpaca,
    format_baichuan,
    format_baichuan2,
    format_chatglm3,
    format_chatml,
    format_gemma,
    format_intel,
    format_llama2,
    format_llama3,
    format_mistral_instruct,
    format_mistrallite,
    format_oasst_llama,
    format_open_orca,
    format_openbuddy,
    format_openchat,
    format_phind,
    format_pygmalion,
    format_qwen,
    format_redpajama_incite,
    format_saiga,
    format_snoozy,
    format_vicuna,
    format_zephyr,
)
from llamacore.llama_hub import download

if TYPE_CHECKING:
    from llamacore.llama import Llama

LLAVA_15_TEMPLATE = TEMPLATES["llava-1-5"]

# HuggingFace chat templates llama-cpp-python recognises in GGUF metadata (data, compared exactly)
CHATML_CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
                        "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
                        "{{ '<|im_start|>assistant\n' }}{% endif %}")
CHATML_BOS_TOKEN = "<s>"
CHATML_EOS_TOKEN = "<|im_end|>"
_MISTRAL_HEAD = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
                 "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
                 "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
                 "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}")
_MISTRAL_TAIL = ("{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
                 "{% endif %}{% endfor %}")
MISTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + "{{ message['content'] + eos_token + ' ' }}" + _MISTRAL_TAIL
MISTRAL_INSTRUCT_BOS_TOKEN = "<s>"
MISTRAL_INSTRUCT_EOS_TOKEN = "</s>"
MIXTRAL_INSTRUCT_CHAT_TEMPLATE = _MISTRAL_HEAD + "{{ message['content'] + eos_token}}" + _MISTRAL_TAIL
LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

__all__ = [
    "ChatFormatter", "ChatFormatterResponse", "FORMATTERS", "Jinja2ChatFormatter",
    "hf_autotokenizer_to_chat_formatter", "hf_tokenizer_config_to_chat_formatter", "format_alpaca",
    "format_baichuan", "format_baichuan2", "format_chatglm3", "format_chatml", "format_gemma", "format_intel",
    "format_llama2", "format_llama3", "format_mistral_instruct", "format_mistrallite", "format_oasst_llama",
    "format_open_orca", "format_openbuddy", "format_openchat", "format_phind", "format_pygmalion", "format_qwen",
    "format_redpajama_incite", "format_saiga", "format_snoozy", "format_vicuna", "format_zephyr",
    "CHATML_BOS_TOKEN", "CHATML_CHAT_TEMPLATE", "CHATML_EOS_TOKEN", "LLAMA3_INSTRUCT_CHAT_TEMPLATE",
    "LLAVA_15_TEMPLATE", "MISTRAL_INSTRUCT_BOS_TOKEN", "MISTRAL_INSTRUCT_CHAT_TEMPLATE", "MISTRAL_INSTRUCT_EOS_TOKEN",
    "MIXTRAL_INSTRUCT_CHAT_TEMPLATE", "LlamaChatCompletionHandler", "LlamaChatCompletionHandlerNotFoundException",
    "LlamaChatCompletionHandlerRegistry", "Llava15ChatHandler", "MTMDChatHandler",
    "chat_formatter_to_chat_completion_handler", "get_chat_completion_handler", "guess_chat_format_from_gguf_metadata",
    "hf_autotokenizer_to_chat_completion_handler", "hf_tokenizer_config_to_chat_completion_handler",
    "register_chat_completion_handler", "register_chat_format",
]


# -- chat completion handlers ----------------------------------------------------------------

class LlamaChatCompletionHandler(Protocol):
    """Runs a chat completion on `llama`: a chat.completion, or an iterator of chunks when streaming."""

    def __call__(self, *, llama: Llama, messages: Messages, **kwargs: Any) -> Any: ...


class LlamaChatCompletionHandlerNotFoundException(Exception):
    pass


class LlamaChatCompletionHandlerRegistry:
    """Handlers by name; every instance shares one table (llama-cpp-python's registry is a singleton)."""

    _chat_handlers: dict[str, LlamaChatCompletionHandler] = {}

    def register_chat_completion_handler(self, name: str, chat_handler: LlamaChatCompletionHandler,
                                         overwrite: bool = False) -> None:
        if not overwrite and name in self._chat_handlers:
            raise ValueError(f"a chat handler named {name!r} is registered already; pass overwrite=True to replace it")
        self._chat_handlers[name] = chat_handler

    def unregister_chat_handler(self, name: str) -> None:
        if self._chat_handlers.pop(name, None) is None:
            raise ValueError(f"no chat handler is registered as {name!r}")

    def get_chat_completion_handler_by_name(self, name: str) -> LlamaChatCompletionHandler:
        try:
            return self._chat_handlers[name]
        except KeyError:
            raise LlamaChatCompletionHandlerNotFoundException(
                f"Invalid chat handler: {name} (valid formats: {list(self._chat_handlers)})") from None


def get_chat_completion_handler(name: str) -> LlamaChatCompletionHandler:
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


def register_chat_completion_handler(name: str) -> Callable[[Any], Any]:
    def register(handler: Any) -> Any:
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, handler)
        return handler
    return register


def register_chat_format(name: str) -> Callable[[Any], Any]:
    """Decorator: register a ChatFormatter as the handler `name` (the formatter is returned unchanged)."""
    def register(formatter: Any) -> Any:
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
            name, chat_formatter_to_chat_completion_handler(formatter))
        return formatter
    return register


def chat_formatter_to_chat_completion_handler(chat_formatter: ChatFormatter) -> LlamaChatCompletionHandler:
    """A handler that completes the prompt `chat_formatter` writes, stopping at its stop strings.

    Sampling keywords go to the completion; any other keyword is a template variable for the formatter.
    """
    def chat_completion_handler(*, llama: Llama, messages: Messages, functions: list | None = None,
                                function_call: Any = None, tools: list | None = None, tool_choice: Any = None,
                                temperature: float = 0.2, stream: bool = False, stop: str | list[str] | None = None,
                                max_tokens: int | None = None, model: str | None = None,
                                response_format: dict | None = None, grammar: Any = None,
                                logprobs: bool | None = None, top_logprobs: int | None = None,
                                logits_processor: Any = None, tfs_z: float = 1.0, **kwargs: Any) -> Any:
        from llamacore.chat import _chat_chunks
        from llamacore.responses import ChatStream, ChoiceOutput, Envelope, usage
        from llamacore.sampling import SamplingParams, check_tfs_z

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
            chunks: Iterator[Any] = _chat_chunks(events, ChatStream(envelope, ChoiceOutput(), None, None))
            return chunks
        output = ChoiceOutput()
        for event in events:
            output.add(event)
        return envelope.chat([output.chat_choice(None)], usage(n_prompt, output.n_generated))

    return chat_completion_handler


def hf_autotokenizer_to_chat_completion_handler(pretrained_model_name_or_path: str | os.PathLike[str]
                                                ) -> LlamaChatCompletionHandler:
    return chat_formatter_to_chat_completion_handler(hf_autotokenizer_to_chat_formatter(pretrained_model_name_or_path))


def hf_tokenizer_config_to_chat_completion_handler(tokenizer_config: dict[str, Any], add_generation_prompt: bool = True
                                                   ) -> LlamaChatCompletionHandler:
    return chat_formatter_to_chat_completion_handler(
        hf_tokenizer_config_to_chat_formatter(tokenizer_config, add_generation_prompt=add_generation_prompt))


def guess_chat_format_from_gguf_metadata(metadata: dict[str, str]) -> str | None:
    """The chat_format name of a GGUF's tokenizer.chat_template when it is one of the templates above."""
    template = metadata.get("tokenizer.chat_template")
    known = {CHATML_CHAT_TEMPLATE: "chatml", MISTRAL_INSTRUCT_CHAT_TEMPLATE: "mistral-instruct",
             MIXTRAL_INSTRUCT_CHAT_TEMPLATE: "mistral-instruct", LLAMA3_INSTRUCT_CHAT_TEMPLATE: "llama-3"}
    return known.get(template) if template is not None else None


for _name, _formatter in FORMATTERS.items():
    register_chat_format(_name)(_formatter)


# -- vision ----------------------------------------------------------------------------------

class MTMDChatHandler:
    """A projector for `Llama`; the model's own chat template formats the conversation."""

    chat_template: str | None = None

    def __init__(self, clip_model_path: str | os.PathLike, verbose: bool = True, use_gpu: bool = True) -> None:
        self.clip_model_path = os.fspath(clip_model_path)
        self.verbose = verbose
        self.use_gpu = use_gpu

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str | None, local_dir: str | os.PathLike[str] | None = None,
                        local_dir_use_symlinks: bool | str = "auto", cache_dir: str | os.PathLike[str] | None = None,
                        **kwargs: Any) -> Self:
        """The handler for the projector `filename` (a name or glob matching one file at the top of
        the repository, as llama-cpp-python looks) of a Hugging Face Hub repository, fetched as
        `Llama.from_pretrained` fetches models; `kwargs` go to the constructor."""
        path = download(repo_id, filename, None, local_dir, local_dir_use_symlinks, cache_dir, top_level_only=True)
        return cls(clip_model_path=path, **kwargs)


class Llava15ChatHandler(MTMDChatHandler):
    """A LLaVA-1.5 projector and its USER/ASSISTANT prompt format."""

    chat_template = LLAVA_15_TEMPLATE

    def __init__(self, clip_model_path: str | os.PathLike, verbose: bool = True) -> None:
        super().__init__(clip_model_path, verbose)

