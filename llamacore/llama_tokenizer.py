"""llama-cpp-python's tokenizer classes: `LlamaTokenizer` (the GGUF vocabulary, through llama.cpp)
and `LlamaHFTokenizer` (a HuggingFace `transformers` tokenizer, imported only when asked for)."""

from __future__ import annotations

import abc
import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llamacore._core import Model

__all__ = ["BaseLlamaTokenizer", "LlamaHFTokenizer", "LlamaTokenizer"]


class BaseLlamaTokenizer(abc.ABC):
    @abc.abstractmethod
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of UTF-8 `text`; `add_bos` adds the model's BOS, `special` parses special-token text."""

    @abc.abstractmethod
    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        """Bytes of `tokens`; with `prev_tokens`, only the bytes `tokens` add after them.
        `special` renders special tokens as their text."""


def _suffix(whole: bytes, before: bytes) -> bytes:
    """What `whole` adds after `before` (all of it when `before` is not its prefix)."""
    return whole[len(before):] if whole.startswith(before) else whole


class LlamaTokenizer(BaseLlamaTokenizer):
    """The vocabulary of a GGUF model: `LlamaTokenizer(llama)` (a Llama, or a llamacore.Model)."""

    def __init__(self, llama: Any) -> None:
        model: Any = getattr(llama, "model", llama)             # a Llama holds its Model as .model
        self._model: Model = model

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return self._model.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        """The tokens' pieces joined; only after a leading BOS does the first piece lose its leading
        space. `prev_tokens` changes nothing: a GGUF vocabulary's pieces do not depend on what came
        before (llama-cpp-python's LlamaTokenizer ignores it too, and its completions rely on that)."""
        piece = self._model.token_to_piece
        text = b"".join([piece(t, special) for t in tokens])
        if tokens and tokens[0] == self._model.token_bos and text.startswith(b" "):
            return text[1:]
        return text

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: list[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str | os.PathLike[str]) -> LlamaTokenizer:
        """A tokenizer of a GGUF file's vocabulary alone (no weights are loaded)."""
        from llamacore._core import Model

        return cls(Model(path, vocab_only=True))


class LlamaHFTokenizer(BaseLlamaTokenizer):
    """A `transformers` tokenizer behind the same interface (for models whose GGUF vocabulary is off)."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf_tokenizer = hf_tokenizer

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        # as llama-cpp-python: `special` decides whether the tokenizer adds its special tokens
        return list(self.hf_tokenizer.encode(text.decode("utf-8", errors="ignore"), add_special_tokens=special))

    def detokenize(self, tokens: list[int], prev_tokens: list[int] | None = None, special: bool = False) -> bytes:
        def text(ids: list[int]) -> bytes:
            return str(self.hf_tokenizer.decode(ids, skip_special_tokens=not special)).encode("utf-8", errors="ignore")

        if prev_tokens is not None:
            return _suffix(text(list(prev_tokens) + list(tokens)), text(list(prev_tokens)))
        return text(list(tokens))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike[str]) -> LlamaHFTokenizer:
        return cls(auto_tokenizer().from_pretrained(pretrained_model_name_or_path))


def auto_tokenizer() -> Any:
    """`transformers.AutoTokenizer`, or ImportError saying how to get it."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise ImportError("this needs HuggingFace's `transformers` library: pip install transformers") from exc
    return transformers.AutoTokenizer
