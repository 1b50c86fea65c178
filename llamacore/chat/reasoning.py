"""Thinking models' settings, as llama-server names them: `reasoning_format` (how the answer's
reasoning comes back: llamacore.chat.answer) and `reasoning` (whether a template thinks:
llamacore.chat.thinking). Pure Python: the config layer checks values with it.

`reasoning_format`: none leaves thinking in the content; auto and deepseek move it to
reasoning_content; deepseek-legacy also keeps it inline in a stream's content.
"""

from __future__ import annotations

REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")
REASONING_MODES = ("on", "off", "auto")      # llama-server's --reasoning


def check_format(value: str) -> str:
    if value not in REASONING_FORMATS:
        raise ValueError(f"reasoning_format: expected one of {', '.join(REASONING_FORMATS)}, got {value!r}")
    return value


__all__ = ["REASONING_FORMATS", "REASONING_MODES", "check_format"]
