"""Chat templates of a config compiled by llama.cpp's Jinja engine before serving, so that a template
that does not compile is a config error naming its file and line, not a failure of every request."""

from __future__ import annotations

from llamacore.chat import native
from llamaserve.config.parse import ConfigError
from llamaserve.config.settings import ServerConfig


def check_templates(config: ServerConfig) -> None:
    """ConfigError listing every model whose chat template (inline or chat_template_file) does not compile."""
    label = str(config.source) if config.source else "<command line>"
    problems = []
    for entry in config.models:
        if entry.chat_template is None:
            continue
        try:
            native.compiled(entry.chat_template)
        except ValueError as e:
            where = (f"chat_template_file: {entry.chat_template_file}" if entry.chat_template_file
                     else "chat_template: the template")
            first, _, context = str(e).partition("\n")
            problems.append(f"{label}: {entry.alias}.{where} does not compile: {first}"
                            + (f" near {context.splitlines()[0].strip()}" if context.strip() else ""))
    if problems:
        raise ConfigError(problems)


__all__ = ["check_templates"]
