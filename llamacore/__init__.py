"""llamacore: a direct Cython binding of llama.cpp with a llama-cpp-python compatible `Llama`.

The compiled extension (llamacore._core, which loads llama.cpp and initialises its backends)
is imported on first use of one of its names, so the pure-Python subpackages (gguf, grammar, chat,
generation, vision) import without the native library.
"""

import importlib as _importlib
import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from llamacore._version import __version__
from llamacore.llama_cpp import __all__ as _CONSTANTS
from llamacore.llama_types import __all__ as _TYPES

# A library logs, the application decides where it goes: without this, llama.cpp's warnings would
# reach Python's last-resort handler (stderr) in programs that never configure logging.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

# name -> the submodule that defines it
_EXPORTS = {
    "Batch": "_core", "Context": "_core", "Image": "_core", "ImageChunk": "_core", "LoraAdapter": "_core",
    "Model": "_core", "Projector": "_core", "Sampler": "_core", "TokenLoop": "_core",
    "llama_cpp_version": "_core", "max_parallel_sequences": "_core", "set_verbose": "_core",
    "supports_gpu_offload": "_core", "system_info": "_core",
    "grammar_work_limit": "_core", "set_grammar_work_limit": "_core",
    "ContextFullError": "errors", "DecodeAbortedError": "errors", "DecodeError": "errors",
    "GrammarBudgetError": "errors",
    "Llama": "llama", "LlamaGrammar": "llama_grammar",
    "LogitsProcessorList": "generation.processors", "StoppingCriteriaList": "generation.processors",
    # llama-cpp-python's top-level names for its caches, states and tokenizers
    "BaseLlamaCache": "llama_cache", "LlamaCache": "llama_cache", "LlamaDiskCache": "llama_cache",
    "LlamaRAMCache": "llama_cache", "LlamaState": "llama_cache", "BaseLlamaTokenizer": "llama_tokenizer",
    "LlamaTokenizer": "llama_tokenizer",
}

# llama-cpp-python's llama_types names, at the top level as its `from .llama_types import *` puts them
_EXPORTS.update({name: "llama_types" for name in _TYPES if name not in _EXPORTS})

# llama.cpp's integer constants that Llama(...) takes (LLAMA_SPLIT_MODE_LAYER, GGML_TYPE_Q8_0, ...), as
# llama-cpp-python exposes them; a pure-Python module, so importing it loads nothing native.
_EXPORTS.update(dict.fromkeys(_CONSTANTS, "llama_cpp"))

# the one list of exports (tests/llamacore/core/test_exports.py holds TYPE_CHECKING to it)
__all__ = list(_EXPORTS)

if _TYPE_CHECKING:
    from llamacore._core import (
        Batch,
        Context,
        Image,
        ImageChunk,
        LoraAdapter,
        Model,
        Projector,
        Sampler,
        TokenLoop,
        grammar_work_limit,
        llama_cpp_version,
        max_parallel_sequences,
        set_grammar_work_limit,
        set_verbose,
        supports_gpu_offload,
        system_info,
    )
    from llamacore.errors import ContextFullError, DecodeAbortedError, DecodeError, GrammarBudgetError
    from llamacore.generation.processors import LogitsProcessorList, StoppingCriteriaList
    from llamacore.llama import Llama
    from llamacore.llama_cache import BaseLlamaCache, LlamaCache, LlamaDiskCache, LlamaRAMCache, LlamaState
    from llamacore.llama_grammar import LlamaGrammar
    from llamacore.llama_tokenizer import BaseLlamaTokenizer, LlamaTokenizer


def __getattr__(name: str) -> _Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'llamacore' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"llamacore.{module}"), name)
    globals()[name] = value         # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
