"""Whether a chat template thinks and the `enable_thinking` it is rendered with, as llama-server decides.

Templates read `enable_thinking` (Qwen3, DeepSeek-R1, QwQ, Command-R7B, ...). As llama-server,
it is true for a template that can think unless `reasoning` is off, and a request's (or the
model's) `chat_template_kwargs` can set it; `reasoning_effort: none` turns it off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llamacore.chat import native
from llamacore.chat.reasoning import REASONING_MODES


def supports_thinking(template: str) -> bool:
    """Whether a template renders differently with enable_thinking on and off (llama.cpp's test)."""
    return native.compiled(template).supports_thinking


def template_kwargs(template: str, *, reasoning: str = "auto", defaults: Mapping[str, Any] | None = None,
                    request: Mapping[str, Any] | None = None, reasoning_effort: str | None = None) -> dict[str, Any]:
    """The extra variables `template` is rendered with: the model's `defaults` and the request's
    chat_template_kwargs (the request wins), with `enable_thinking` resolved and `preserve_reasoning`
    defaulted to true as llama-server does.

    `reasoning` is the model's on/off/auto; ValueError for an enable_thinking that is not a boolean.
    """
    if reasoning not in REASONING_MODES:
        raise ValueError(f"reasoning: expected one of {', '.join(REASONING_MODES)}, got {reasoning!r}")
    # llama-server passes preserve_reasoning=true unless told otherwise (--no-reasoning-preserve): templates
    # that read it keep earlier turns' reasoning in the history
    kwargs = {"preserve_reasoning": True, **(defaults or {}), **(request or {})}
    thinking = kwargs.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise ValueError(f"chat_template_kwargs.enable_thinking: expected a boolean, got {type(thinking).__name__}")
    if thinking is None:
        thinking = reasoning == "on" or (reasoning == "auto" and supports_thinking(template))
    if reasoning_effort is not None:
        if not isinstance(reasoning_effort, str):
            raise ValueError("reasoning_effort: expected a string")
        if reasoning_effort == "none":
            thinking = False
            kwargs.pop("reasoning_effort", None)
        elif reasoning_effort:
            kwargs["reasoning_effort"] = reasoning_effort
    kwargs["enable_thinking"] = thinking
    return kwargs


__all__ = ["supports_thinking", "template_kwargs"]
