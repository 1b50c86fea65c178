"""llama-cpp-python's `llama_chat_format` module, for drop-in use: chat formatters (by name and from
Jinja templates), the registry of chat completion handlers, and the vision chat handlers
(`Llama(model_path, chat_handler=Llava15ChatHandler(clip_model_path=...))`).

In llama-cpp-python a vision handler owns the projector and the prompt format. Here `Llama` loads
the projector itself (llamacore.Projector, one per model) and renders images like any other part
of a chat, so a handler only names the projector file and, for LLaVA-1.5, its prompt format.

The formatters live in llamacore._llama.chat_formatters; each named one is registered here as a
handler (`get_chat_completion_handler("chatml")`), which runs a completion on a `Llama` with the
prompt the formatter writes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from llamacore._llama.chat_formatters import (
    FORMATTERS,
    ChatFormatter,
    ChatFormatterResponse,
    Jinja2ChatFormatter,
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
    hf_autotokenizer_to_chat_formatter,
    hf_tokenizer_config_to_chat_formatter,
)
from llamacore._llama.chat_jinja import LlamaChatCompletionHandler, chat_formatter_to_chat_completion_handler
from llamacore._llama.vision_handler import LLAVA_15_TEMPLATE, Llava15ChatHandler, MTMDChatHandler

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
