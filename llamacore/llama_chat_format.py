"""llama-cpp-python's vision chat handlers, by name, for drop-in use:
`Llama(model_path, chat_handler=Llava15ChatHandler(clip_model_path=...))`.

In llama-cpp-python a handler owns the projector and the prompt format. Here `Llama` loads the
projector itself (llamacore.Projector, one per model) and renders images like any other part of
a chat, so a handler only names the projector file and, for LLaVA-1.5, its prompt format.
"""

from __future__ import annotations

import os

from llamacore.chat_format import TEMPLATES

LLAVA_15_TEMPLATE = TEMPLATES["llava-1-5"]

__all__ = ["LLAVA_15_TEMPLATE", "Llava15ChatHandler", "MTMDChatHandler"]


class MTMDChatHandler:
    """A projector for `Llama`; the model's own chat template formats the conversation."""

    chat_template: str | None = None

    def __init__(self, clip_model_path: str | os.PathLike, verbose: bool = True, use_gpu: bool = True) -> None:
        self.clip_model_path = os.fspath(clip_model_path)
        self.verbose = verbose
        self.use_gpu = use_gpu


class Llava15ChatHandler(MTMDChatHandler):
    """A LLaVA-1.5 projector and its USER/ASSISTANT prompt format."""

    chat_template = LLAVA_15_TEMPLATE

    def __init__(self, clip_model_path: str | os.PathLike, verbose: bool = True) -> None:
        super().__init__(clip_model_path, verbose)
