"""A model entry's chat template in a config: inline or read from chat_template_file (checked here;
whether it compiles is checked where llama.cpp is at hand, llamaserve.cli.templates), llama.cpp's
built-in template names, and chat_format names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llamacore.chat.templates import TEMPLATES
from llamaserve.config.checks import Problems, config_path
from llamaserve.config.settings import ModelEntry
from llamaserve.config.values import suggest

# a chat_template_file larger than this is not a template (the largest llama.cpp ships is 30 kB)
MAX_TEMPLATE_BYTES = 1 << 20

# llama.cpp's built-in chat template names (llama-server's --chat-template NAME) -> our chat_format of
# the same layout, or None where this server has no such built-in
LLAMA_CPP_TEMPLATE_NAMES: dict[str, str | None] = {
    "chatml": "chatml", "llama2": "llama-2", "llama3": "llama-3", "phi3": "phi-3", "zephyr": "zephyr",
    "gemma": "gemma", "vicuna": "vicuna", "command-r": "command-r", **{name: None for name in (
        "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3", "mistral-v3-tekken",
        "mistral-v7", "mistral-v7-tekken", "phi4", "falcon3", "monarch", "orion", "openchat", "vicuna-orca",
        "deepseek", "deepseek2", "deepseek3", "chatglm3", "chatglm4", "glmedge", "minicpm",
        "exaone3", "exaone4", "rwkv-world", "granite", "gigachat", "megrez", "yandex")}}


def without_template(defaults: dict, entry: dict) -> dict:
    """`defaults` less its chat template when the entry gives its own, inline or as a file."""
    if "chat_template" in entry or "chat_template_file" in entry:
        return {k: v for k, v in defaults.items() if k not in ("chat_template", "chat_template_file")}
    return defaults


def read_chat_template(label: str, raw: dict, base_dir: Path, problems: Problems) -> tuple[str | None, Path | None]:
    """The entry's chat template text and the file it came from (chat_template_file), read and checked
    here; whether it compiles is checked where llama.cpp is at hand (llamaserve.cli.templates)."""
    if raw.get("chat_template_file") is None:
        return raw.get("chat_template"), None
    key = f"{label}.chat_template_file"
    if raw.get("chat_template") is not None:
        problems.add(key, "give either chat_template or chat_template_file, not both")
        return None, None
    path = config_path(raw["chat_template_file"], base_dir)
    try:
        if path.stat().st_size > MAX_TEMPLATE_BYTES:
            problems.add(key, f"{path} is larger than {MAX_TEMPLATE_BYTES >> 20} MiB: not a chat template")
            return None, None
        return path.read_text(encoding="utf-8"), path
    except UnicodeDecodeError as e:
        problems.add(key, f"{path} is not UTF-8 text ({e.reason} at byte {e.start})")
    except OSError as e:
        problems.add(key, f"cannot read {path}: {e.strerror or e}")
    except ValueError:              # a NUL byte: no file system has such a name
        problems.add(key, f"not a valid path: {raw['chat_template_file']!r}")
    return None, None


def named_template(label: str, template: Any, problems: Problems) -> str | None:
    """A chat_template that is one of llama.cpp's template names means that built-in layout (rendering
    the name as a Jinja template would send the name itself as every prompt)."""
    if template not in LLAMA_CPP_TEMPLATE_NAMES:
        return None
    ours = LLAMA_CPP_TEMPLATE_NAMES[template]
    if ours is None:
        problems.add(f"{label}.chat_template", f"{template!r} is a llama.cpp built-in template name this server "
                                               f"does not have; give the Jinja template itself, or a chat_format "
                                               f"({', '.join(sorted(TEMPLATES))})")
    return ours


def check_chat_formats(entries: list[tuple[str, ModelEntry]], problems: Problems) -> None:
    named = [(label, e.chat_format) for label, e in entries if e.chat_format]
    if not named:
        return
    for label, name in named:
        if name not in TEMPLATES:
            problems.add(f"{label}.chat_format", f"unknown chat format {name!r}{suggest(name, TEMPLATES)}; "
                                                 f"known: {', '.join(TEMPLATES)}")


__all__ = ["LLAMA_CPP_TEMPLATE_NAMES", "MAX_TEMPLATE_BYTES", "check_chat_formats", "named_template",
           "read_chat_template", "without_template"]
