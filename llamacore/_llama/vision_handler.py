"""llama-cpp-python's vision chat handlers: `chat_handler=Llava15ChatHandler(clip_model_path=...)`
names a projector for `Llama` (the model's own chat template, or LLaVA-1.5's, formats the chat)."""

from __future__ import annotations

import os
from typing import Any, Self

from llamacore.chat.templates import TEMPLATES
from llamacore.gguf.hub import download

LLAVA_15_TEMPLATE = TEMPLATES["llava-1-5"]


def is_vision_handler(handler: Any) -> bool:
    """Whether a `chat_handler` names a projector (lcp's vision handlers, or one shaped like them)."""
    return isinstance(handler, MTMDChatHandler) or hasattr(handler, "clip_model_path")


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
