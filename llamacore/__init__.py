"""llamacore: a direct Cython binding of llama.cpp with a llama-cpp-python compatible `Llama`."""

from llamacore._core import (
    Batch,
    Context,
    LoraAdapter,
    Model,
    Sampler,
    llama_cpp_version,
    max_parallel_sequences,
    set_verbose,
    supports_gpu_offload,
    system_info,
)
from llamacore.errors import ContextFullError, DecodeAbortedError, DecodeError
from llamacore.llama import Llama

__all__ = [
    "Batch", "Context", "ContextFullError", "DecodeAbortedError", "DecodeError", "Llama", "LoraAdapter",
    "Model", "Sampler", "llama_cpp_version", "max_parallel_sequences", "set_verbose",
    "supports_gpu_offload", "system_info",
]
