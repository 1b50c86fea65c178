"""Chat prompt rendering: HuggingFace-style Jinja chat templates plus named fallbacks.

Templates come from untrusted GGUF metadata or API callers, so they run in an
immutable Jinja sandbox configured the way ``transformers`` configures it
(trim_blocks, lstrip_blocks, loopcontrols), so that a template renders the same
prompt here as it does in ``tokenizer.apply_chat_template``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["TEMPLATES", "ChatTemplateError", "get_template", "render_chat", "resolve_template"]


class ChatTemplateError(ValueError):
    """A chat template failed to compile or render (bad template, bad messages, or a sandbox violation).

    Derives from ValueError so servers can report it as a client error.
    """


class _GenerationTag(Extension):
    """Accept HF's ``{% generation %}...{% endgeneration %}`` markers and render their body unchanged.

    transformers uses the tag to build assistant-token masks; several real templates
    contain it and would otherwise fail to compile.
    """

    tags = {"generation"}

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _StrictSandbox(ImmutableSandboxedEnvironment):
    """Sandbox that fails on unsafe attribute access instead of yielding a silent Undefined,
    so probing templates such as ``{{ ''.__class__ }}`` are rejected, not rendered as ''."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")


def _raise_exception(message: str) -> None:
    """Template-callable used by HF templates to reject conversations they cannot format."""
    raise ChatTemplateError(message)


def _strftime_now(fmt: str) -> str:
    """Template-callable some templates (Llama 3.x) use to insert today's date."""
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """HF's tojson: plain json.dumps without Jinja's HTML escaping, so tool schemas appear verbatim."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


_ENV = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _GenerationTag])
_ENV.filters["tojson"] = _tojson
_ENV.globals["raise_exception"] = _raise_exception
_ENV.globals["strftime_now"] = _strftime_now


@lru_cache(maxsize=64)
def _compile(template: str) -> Any:
    """Compile once per distinct template string; a server renders the same template on every request."""
    try:
        return _ENV.from_string(template)
    except Exception as exc:
        raise ChatTemplateError(f"invalid chat template: {exc}") from exc


def _flatten_content(message: Mapping[str, Any], media_marker: str | None = None) -> dict[str, Any]:
    """Join OpenAI text content parts with newlines, since most templates expect content to be a string.

    An `image_url` part becomes `media_marker` (no newline around it, as llama.cpp's server joins
    them); without a marker (no vision projector) it is refused.
    """
    content = message.get("content")
    if content is None:              # OpenAI sends null content next to tool_calls; templates expect text
        return {**message, "content": ""}
    if not isinstance(content, list):
        return dict(message)
    out, after_text = "", False
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
        if kind == "image_url":
            if media_marker is None:
                raise ChatTemplateError("image input is not supported: this model has no vision projector "
                                        "(clip_model_path, or mmproj)")
            out, after_text = out + media_marker, False
            continue
        if kind != "text":
            raise ChatTemplateError(f"unsupported content part type {kind!r} (expected 'text' or 'image_url')")
        text = part.get("text", "")
        if not isinstance(text, str):
            raise ChatTemplateError(f"content part text must be a string, got {type(text).__name__}")
        out, after_text = out + ("\n" if after_text else "") + text, True
    return {**message, "content": out}


def message_text(message: Mapping[str, Any]) -> str:
    """A message's content as the text a template sees (text parts joined with newlines)."""
    return _flatten_content(message)["content"]


def render_chat(
    template: str,
    messages: list[dict],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list | None = None,
    media_marker: str | None = None,
    **extra: Any,
) -> str:
    """Render ``messages`` with a Jinja chat ``template`` and return the prompt text.

    ``extra`` becomes additional template variables (e.g. ``enable_thinking``,
    ``date_string``). ``media_marker`` stands for each image part (see _flatten_content).
    The result may contain ``bos_token`` literally, so tokenize it
    with special-token parsing and without adding a second BOS.
    Raises ChatTemplateError for any compile or render failure.
    """
    compiled = _compile(template)
    now = datetime.now()
    context = {
        # today's date under the names Llama 3.x and FireFunction templates read (as llama.cpp passes them)
        "date_string": now.strftime("%d %b %Y"), "datetime": now.strftime("%b %d %Y"),
        **extra,
        "messages": [_flatten_content(m, media_marker) for m in messages],
        "bos_token": bos_token,
        "eos_token": eos_token,
        "add_generation_prompt": add_generation_prompt,
        "tools": tools,
    }
    try:
        return compiled.render(context)
    except ChatTemplateError:
        raise
    except Exception as exc:
        # Any failure here comes from the (untrusted) template or the caller's messages.
        raise ChatTemplateError(f"chat template rendering failed: {type(exc).__name__}: {exc}") from exc


# --- Named built-in templates -------------------------------------------------
# Written for this project to reproduce each family's canonical prompt layout.
# Formats without a system role fold the system message into the first turn, and
# formats without a tool role treat any non-assistant message as a user turn.

_SPLIT_SYSTEM = (
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set system = messages[0].content or '' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system = default_system -%}{%- set loop_messages = messages -%}"
    "{%- endif -%}"
)

_GEN_PROMPT = "{%- if add_generation_prompt -%}{{- PROMPT -}}{%- endif -%}"


def _with_system(body: str, default_system: str = "") -> str:
    """Prefix ``body`` with code splitting a leading system message into ``system``/``loop_messages``."""
    return "{%- set default_system = " + json.dumps(default_system) + " -%}" + _SPLIT_SYSTEM + body


_CHATML = (
    "{%- for message in messages -%}"
    r"{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' -}}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", r"'<|im_start|>assistant\n'")
)

_LLAMA_3 = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    r"{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n'"
    " + (message.content or '') | trim + '<|eot_id|>' -}}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", r"'<|start_header_id|>assistant<|end_header_id|>\n\n'")
)

_LLAMA_2 = _with_system(
    "{%- for message in loop_messages -%}"
    "{%- if message.role == 'assistant' -%}"
    "{{- ' ' + (message.content or '') | trim + ' ' + eos_token -}}"
    "{%- else -%}"
    "{%- set content = (message.content or '') | trim -%}"
    "{%- if loop.first and system -%}"
    r"{%- set content = '<<SYS>>\n' + system | trim + '\n<</SYS>>\n\n' + content -%}"
    "{%- endif -%}"
    "{{- bos_token + '[INST] ' + content + ' [/INST]' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

_MISTRAL_INSTRUCT = _with_system(
    "{{- bos_token -}}"
    "{%- for message in loop_messages -%}"
    "{%- if message.role == 'assistant' -%}"
    "{{- (message.content or '') + eos_token -}}"
    "{%- else -%}"
    "{%- set content = message.content or '' -%}"
    r"{%- if loop.first and system -%}{%- set content = system + '\n\n' + content -%}{%- endif -%}"
    "{{- '[INST] ' + content + ' [/INST]' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

_GEMMA = _with_system(
    "{{- bos_token -}}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message.role == 'assistant' else 'user' -%}"
    "{%- set content = (message.content or '') | trim -%}"
    r"{%- if loop.first and system -%}{%- set content = system | trim + '\n\n' + content -%}{%- endif -%}"
    r"{{- '<start_of_turn>' + role + '\n' + content + '<end_of_turn>\n' -}}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", r"'<start_of_turn>model\n'")
)

_PHI_3 = (
    "{%- for message in messages -%}"
    r"{{- '<|' + message.role + '|>\n' + (message.content or '') + '<|end|>\n' -}}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", r"'<|assistant|>\n'")
)

_ZEPHYR = (
    "{%- for message in messages -%}"
    r"{{- '<|' + message.role + '|>\n' + (message.content or '') + eos_token + '\n' -}}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", r"'<|assistant|>\n'")
)

_VICUNA = _with_system(
    "{{- system + ' ' -}}"
    "{%- for message in loop_messages -%}"
    "{%- if message.role == 'assistant' -%}"
    "{{- 'ASSISTANT: ' + (message.content or '') + eos_token -}}"
    "{%- else -%}"
    "{{- 'USER: ' + (message.content or '') + ' ' -}}"
    "{%- endif -%}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", "'ASSISTANT:'"),
    default_system=(
        "A chat between a curious user and an artificial intelligence assistant. "
        "The assistant gives helpful, detailed, and polite answers to the user's questions."
    ),
)

_ALPACA = _with_system(
    r"{{- system + '\n\n' -}}"
    "{%- for message in loop_messages -%}"
    "{%- if message.role == 'assistant' -%}"
    r"{{- '### Response:\n' + (message.content or '') + '\n\n' -}}"
    "{%- else -%}"
    r"{{- '### Instruction:\n' + (message.content or '') + '\n\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", r"'### Response:\n'"),
    default_system=(
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request."
    ),
)

_COMMAND_R = (      # Cohere Command-R / R+ (no tool role: tool results are user turns)
    "{%- for message in messages -%}"
    "{%- set token = {'system': '<|SYSTEM_TOKEN|>', 'assistant': '<|CHATBOT_TOKEN|>'}.get(message.role, "
    "'<|USER_TOKEN|>') -%}"
    "{{- '<|START_OF_TURN_TOKEN|>' + token + (message.content or '') | trim + '<|END_OF_TURN_TOKEN|>' -}}"
    "{%- endfor -%}" + _GEN_PROMPT.replace("PROMPT", "'<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'")
)

# LLaVA-1.5's "USER: ... ASSISTANT:" turns (an image sits in the user text where it was sent)
_LLAVA_15 = (
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}{{ message.content }}"
    "{%- elif message.role == 'user' -%}{{ '\nUSER: ' + message.content }}"
    "{%- elif message.role == 'assistant' -%}{{ '\nASSISTANT: ' + message.content + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '\nASSISTANT: ' }}{%- endif -%}"
)

TEMPLATES: Mapping[str, str] = MappingProxyType({
    "chatml": _CHATML,
    "llama-2": _LLAMA_2,
    "llama-3": _LLAMA_3,
    "mistral-instruct": _MISTRAL_INSTRUCT,
    "gemma": _GEMMA,
    "phi-3": _PHI_3,
    "zephyr": _ZEPHYR,
    "vicuna": _VICUNA,
    "alpaca": _ALPACA,
    "command-r": _COMMAND_R,
    "llava-1-5": _LLAVA_15,
})


def get_template(name: str) -> str:
    """Return the built-in template named ``name`` (the llama-cpp-python ``chat_format`` names)."""
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ValueError(f"unknown chat format {name!r}; known formats: {', '.join(TEMPLATES)}") from None


def resolve_template(chat_format: str | None, chat_template: str | None, gguf_template: str | None) -> str:
    """Pick the template to use: an explicit template, else the named format, else the GGUF's, else chatml.

    Empty strings count as absent, since GGUF metadata and CLI flags often carry "".
    """
    if chat_template:
        return chat_template
    if chat_format:
        return get_template(chat_format)
    if gguf_template:
        return gguf_template
    return TEMPLATES["chatml"]
