"""The names of llama.cpp's load options, and which of them the Model and which the Context takes.

This is the one list of these vocabularies. It is pure Python (importing it does not load
llama.cpp): llamaserve validates its config with it, and the compiled core maps each name to
the enum llama.h / ggml.h declares (core/model.pyx, core/context.pyx; tests/llamacore/gguf/test_options.py
checks that both agree).

The load keys are named as `Llama(...)` and a llamaserve model entry spell them
(``embedding``, ``pooling_type``); `Context` itself calls the last two ``embeddings`` and
``pooling``.
"""

from __future__ import annotations

__all__ = [
    "ATTENTION_TYPES", "CONTEXT_KEYS", "EMBEDDING_ONLY_KEYS", "FLASH_ATTN", "GENERATION_ONLY_KEYS",
    "KV_CACHE_TYPES", "LOAD_KEYS", "MODEL_KEYS", "POOLING_TYPES", "SPLIT_MODES",
]

# ggml_type names (ggml_type_name()) a KV cache can hold: Context(type_k=..., type_v=...)
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")

# llama_pooling_type, in enum order: "unspecified" is -1 (the model's own), "none" 0, ... "rank" 4
POOLING_TYPES = ("unspecified", "none", "mean", "cls", "last", "rank")

# llama_attention_type, in enum order from -1
ATTENTION_TYPES = ("unspecified", "causal", "non_causal")

# llama_flash_attn_type; True and False mean "on" and "off", None means "auto"; "prompts": flash
# attention for batches of 16 tokens or more, plain attention for token generation (vendor/patches/0005)
FLASH_ATTN = ("auto", "on", "off", "prompts")

# llama_split_mode: how layers are spread over several GPUs
SPLIT_MODES = ("none", "layer", "row", "tensor")

# Load keys that go to Model(...), under the same names.
MODEL_KEYS = frozenset({"n_gpu_layers", "main_gpu", "split_mode", "tensor_split", "use_mmap", "use_mlock",
                        "kv_overrides", "rpc_servers"})

# Load keys that go to Context(...), under the same names. n_ctx is a Context key too, but the
# caller sizes it (a server multiplies it by the number of parallel sequences).
CONTEXT_KEYS = frozenset({"n_batch", "n_ubatch", "n_threads", "n_threads_batch", "flash_attn", "type_k",
                          "type_v", "offload_kqv", "rope_freq_base", "rope_freq_scale"})

# Keys that only mean something for one kind of model (``embedding`` true or false).
EMBEDDING_ONLY_KEYS = frozenset({"pooling_type"})      # how token embeddings become one vector
GENERATION_ONLY_KEYS = frozenset({"seed"})             # the default sampling seed

# Every load key: the two splits plus the context size, the kind and the kind-only keys.
LOAD_KEYS = MODEL_KEYS | CONTEXT_KEYS | {"n_ctx", "embedding"} | EMBEDDING_ONLY_KEYS | GENERATION_ONLY_KEYS
