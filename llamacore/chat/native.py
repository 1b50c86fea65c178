"""Chat templates rendered by llama.cpp's own chat layer (common/chat.h, bound in core/chat.pyx).

llama.cpp renders a conversation the way llama-server does for every template it ships and for
new ones: tool-call arguments given as JSON text reach the template as objects, a system message
is folded in where the template has no system role, the variables templates expect (`tools`,
`bos_token`, `add_generation_prompt`, `enable_thinking`, the date, ...) are set, and its Jinja
engine has the filters and methods real templates use (`tojson` without HTML escaping,
`from_json`, list and dict methods). The same call gives how to read the answer: the tool-call
grammar with its triggers, the special tokens to keep in the text, extra stops and the parser
(llamacore.chat.answer).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from llamacore._core import ChatParams, ChatTemplates, Model

COMPILED_TEMPLATES = 64          # templates kept compiled per process (a model's, a request's override)
_compiled: OrderedDict[tuple[str, str, str], ChatTemplates] = OrderedDict()
_lock = threading.Lock()


def compiled(template: str, bos_token: str = "", eos_token: str = "") -> ChatTemplates:
    """`template` compiled by llama.cpp's Jinja engine, kept for the next request that names it;
    ValueError (the engine's message) when it does not compile."""
    key = (template, bos_token, eos_token)
    with _lock:
        found = _compiled.get(key)
        if found is not None:
            _compiled.move_to_end(key)
            return found
    made = ChatTemplates(template=template, bos_token=bos_token, eos_token=eos_token)
    with _lock:
        _compiled[key] = made
        while len(_compiled) > COMPILED_TEMPLATES:
            _compiled.popitem(last=False)
    return made


def special_text(model: Model, token: int) -> str:
    return model.token_to_piece(token, True).decode("utf-8", "replace") if token >= 0 else ""


def for_model(model: Model, template: str) -> ChatTemplates:
    """`template` with `model`'s BOS and EOS texts."""
    return compiled(template, special_text(model, model.token_bos), special_text(model, model.token_eos))


def wire_messages(messages: list[dict[str, Any]], media_marker: str | None = None) -> list[dict[str, Any]]:
    """`messages` as llama.cpp reads them: image and audio parts become media markers (the text
    libmtmd replaces with the media's embeddings). ValueError for what llama-server refuses."""
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{i}] must be an object")
        role = message.get("role")
        if role != "assistant" and "content" not in message:
            raise ValueError(f"messages[{i}]: every message but the assistant's needs 'content'")
        if role == "assistant" and "content" not in message and "tool_calls" not in message:
            raise ValueError(f"messages[{i}]: an assistant message needs 'content' or 'tool_calls'")
        content = message.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind in ("image_url", "input_image", "input_audio", "image"):
                    if media_marker is None:
                        raise ValueError(f"messages[{i}]: {kind} input is not supported: this model has no "
                                         "vision projector (clip_model_path, or mmproj)")
                    parts.append({"type": "media_marker", "text": media_marker})
                else:
                    parts.append(part)
            message = {**message, "content": parts}
        elif content is not None and not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string or an array of parts")
        out.append(dict(message))
    return out


def render(templates: ChatTemplates, messages: list[dict[str, Any]], *, tools: list | None = None,
           tool_choice: str = "auto", parallel_tool_calls: bool | None = None, add_generation_prompt: bool = True,
           continue_final_message: bool = False, template_kwargs: Mapping[str, Any] | None = None,
           reasoning_format: str = "auto", media_marker: str | None = None) -> ChatParams:
    """The prompt of `messages` with `tools` offered, and how to read its answer, as llama-server
    renders it. `template_kwargs` are extra template variables; their enable_thinking (a boolean)
    is also llama.cpp's own switch. ValueError when the template or the messages cannot be used."""
    kwargs = dict(template_kwargs or {})
    thinking = kwargs.get("enable_thinking", True)
    if not isinstance(thinking, bool):
        raise ValueError(f"chat_template_kwargs.enable_thinking: expected a boolean, got {type(thinking).__name__}")
    return templates.apply(wire_messages(messages, media_marker), tools=list(tools) if tools else None,
                           tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                           add_generation_prompt=add_generation_prompt,
                           continue_final_message=True if continue_final_message else None,
                           reasoning_format=reasoning_format, enable_thinking=thinking, template_kwargs=kwargs)


__all__ = ["COMPILED_TEMPLATES", "compiled", "for_model", "render", "special_text", "wire_messages"]
