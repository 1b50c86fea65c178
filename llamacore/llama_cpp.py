"""llama.cpp's integer constants that `Llama(...)` takes, under llama-cpp-python's names.

llama-cpp-python exposes them at package level (`llama_cpp.LLAMA_SPLIT_MODE_LAYER`, ...); llamacore
does too (`llamacore.LLAMA_SPLIT_MODE_LAYER`), lazily, from this module. The values are copied from
the vendored headers (vendor/llama.cpp/include/llama.h, ggml/include/ggml.h and ggml-cpu.h); pure
Python, so importing this does not load llama.cpp. tests/llamacore/llama/test_llama_compat.py checks them against
the compiled tables and against llama-cpp-python's own module.

The `*_NAMES` tables map a value to the name llamacore's `Model`/`Context` (and llamaserve's
config) take, for the options that have one.
"""

from __future__ import annotations

# llama.h: LLAMA_DEFAULT_SEED (a random seed)
LLAMA_DEFAULT_SEED = 0xFFFFFFFF

# enum llama_split_mode
LLAMA_SPLIT_MODE_NONE = 0
LLAMA_SPLIT_MODE_LAYER = 1
LLAMA_SPLIT_MODE_ROW = 2
LLAMA_SPLIT_MODE_TENSOR = 3

# enum llama_rope_scaling_type
LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED = -1
LLAMA_ROPE_SCALING_TYPE_NONE = 0
LLAMA_ROPE_SCALING_TYPE_LINEAR = 1
LLAMA_ROPE_SCALING_TYPE_YARN = 2
LLAMA_ROPE_SCALING_TYPE_LONGROPE = 3
LLAMA_ROPE_SCALING_TYPE_MAX_VALUE = LLAMA_ROPE_SCALING_TYPE_LONGROPE

# enum llama_pooling_type
LLAMA_POOLING_TYPE_UNSPECIFIED = -1
LLAMA_POOLING_TYPE_NONE = 0
LLAMA_POOLING_TYPE_MEAN = 1
LLAMA_POOLING_TYPE_CLS = 2
LLAMA_POOLING_TYPE_LAST = 3
LLAMA_POOLING_TYPE_RANK = 4

# enum llama_attention_type
LLAMA_ATTENTION_TYPE_UNSPECIFIED = -1
LLAMA_ATTENTION_TYPE_CAUSAL = 0
LLAMA_ATTENTION_TYPE_NON_CAUSAL = 1

# enum llama_flash_attn_type
LLAMA_FLASH_ATTN_TYPE_AUTO = -1
LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
LLAMA_FLASH_ATTN_TYPE_ENABLED = 1
LLAMA_FLASH_ATTN_TYPE_PROMPTS = 2          # llamacore's own (vendor/patches/0005): flash attention for prompts only

# enum ggml_type (ggml.h; the gaps are removed types)
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_Q4_0 = 2
GGML_TYPE_Q4_1 = 3
GGML_TYPE_Q5_0 = 6
GGML_TYPE_Q5_1 = 7
GGML_TYPE_Q8_0 = 8
GGML_TYPE_Q8_1 = 9
GGML_TYPE_Q2_K = 10
GGML_TYPE_Q3_K = 11
GGML_TYPE_Q4_K = 12
GGML_TYPE_Q5_K = 13
GGML_TYPE_Q6_K = 14
GGML_TYPE_Q8_K = 15
GGML_TYPE_IQ2_XXS = 16
GGML_TYPE_IQ2_XS = 17
GGML_TYPE_IQ3_XXS = 18
GGML_TYPE_IQ1_S = 19
GGML_TYPE_IQ4_NL = 20
GGML_TYPE_IQ3_S = 21
GGML_TYPE_IQ2_S = 22
GGML_TYPE_IQ4_XS = 23
GGML_TYPE_I8 = 24
GGML_TYPE_I16 = 25
GGML_TYPE_I32 = 26
GGML_TYPE_I64 = 27
GGML_TYPE_F64 = 28
GGML_TYPE_IQ1_M = 29
GGML_TYPE_BF16 = 30
GGML_TYPE_TQ1_0 = 34
GGML_TYPE_TQ2_0 = 35
GGML_TYPE_MXFP4 = 39
GGML_TYPE_NVFP4 = 40
GGML_TYPE_Q1_0 = 41
GGML_TYPE_Q2_0 = 42
GGML_TYPE_COUNT = 43

# enum ggml_numa_strategy (ggml-cpu.h)
GGML_NUMA_STRATEGY_DISABLED = 0
GGML_NUMA_STRATEGY_DISTRIBUTE = 1
GGML_NUMA_STRATEGY_ISOLATE = 2
GGML_NUMA_STRATEGY_NUMACTL = 3
GGML_NUMA_STRATEGY_MIRROR = 4
GGML_NUMA_STRATEGY_COUNT = 5

# value -> llamacore's name (llamacore.gguf.load_options), for the options Model/Context take by name
SPLIT_MODE_NAMES = {LLAMA_SPLIT_MODE_NONE: "none", LLAMA_SPLIT_MODE_LAYER: "layer", LLAMA_SPLIT_MODE_ROW: "row",
                    LLAMA_SPLIT_MODE_TENSOR: "tensor"}
POOLING_TYPE_NAMES = {LLAMA_POOLING_TYPE_UNSPECIFIED: "unspecified", LLAMA_POOLING_TYPE_NONE: "none",
                      LLAMA_POOLING_TYPE_MEAN: "mean", LLAMA_POOLING_TYPE_CLS: "cls",
                      LLAMA_POOLING_TYPE_LAST: "last", LLAMA_POOLING_TYPE_RANK: "rank"}
ATTENTION_TYPE_NAMES = {LLAMA_ATTENTION_TYPE_UNSPECIFIED: "unspecified", LLAMA_ATTENTION_TYPE_CAUSAL: "causal",
                        LLAMA_ATTENTION_TYPE_NON_CAUSAL: "non_causal"}
# the ggml types a KV cache can hold (llamacore.gguf.load_options.KV_CACHE_TYPES)
KV_CACHE_TYPE_NAMES = {GGML_TYPE_F32: "f32", GGML_TYPE_F16: "f16", GGML_TYPE_BF16: "bf16", GGML_TYPE_Q8_0: "q8_0",
                       GGML_TYPE_Q4_0: "q4_0", GGML_TYPE_Q4_1: "q4_1", GGML_TYPE_Q5_0: "q5_0",
                       GGML_TYPE_Q5_1: "q5_1"}

__all__ = [
                      "GGML_NUMA_STRATEGY_COUNT",
                      "GGML_NUMA_STRATEGY_DISABLED",
                      "GGML_NUMA_STRATEGY_DISTRIBUTE",
                      "GGML_NUMA_STRATEGY_ISOLATE",
                      "GGML_NUMA_STRATEGY_MIRROR",
                      "GGML_NUMA_STRATEGY_NUMACTL",
                      "GGML_TYPE_BF16",
                      "GGML_TYPE_COUNT",
                      "GGML_TYPE_F16",
                      "GGML_TYPE_F32",
                      "GGML_TYPE_F64",
                      "GGML_TYPE_I8",
                      "GGML_TYPE_I16",
                      "GGML_TYPE_I32",
                      "GGML_TYPE_I64",
                      "GGML_TYPE_IQ1_M",
                      "GGML_TYPE_IQ1_S",
                      "GGML_TYPE_IQ2_S",
                      "GGML_TYPE_IQ2_XS",
                      "GGML_TYPE_IQ2_XXS",
                      "GGML_TYPE_IQ3_S",
                      "GGML_TYPE_IQ3_XXS",
                      "GGML_TYPE_IQ4_NL",
                      "GGML_TYPE_IQ4_XS",
                      "GGML_TYPE_MXFP4",
                      "GGML_TYPE_NVFP4",
                      "GGML_TYPE_Q1_0",
                      "GGML_TYPE_Q2_0",
                      "GGML_TYPE_Q2_K",
                      "GGML_TYPE_Q3_K",
                      "GGML_TYPE_Q4_0",
                      "GGML_TYPE_Q4_1",
                      "GGML_TYPE_Q4_K",
                      "GGML_TYPE_Q5_0",
                      "GGML_TYPE_Q5_1",
                      "GGML_TYPE_Q5_K",
                      "GGML_TYPE_Q6_K",
                      "GGML_TYPE_Q8_0",
                      "GGML_TYPE_Q8_1",
                      "GGML_TYPE_Q8_K",
                      "GGML_TYPE_TQ1_0",
                      "GGML_TYPE_TQ2_0",
                      "LLAMA_ATTENTION_TYPE_CAUSAL",
                      "LLAMA_ATTENTION_TYPE_NON_CAUSAL",
                      "LLAMA_ATTENTION_TYPE_UNSPECIFIED",
                      "LLAMA_DEFAULT_SEED",
                      "LLAMA_FLASH_ATTN_TYPE_AUTO",
                      "LLAMA_FLASH_ATTN_TYPE_DISABLED",
                      "LLAMA_FLASH_ATTN_TYPE_ENABLED",
                      "LLAMA_FLASH_ATTN_TYPE_PROMPTS",
                      "LLAMA_POOLING_TYPE_CLS",
                      "LLAMA_POOLING_TYPE_LAST",
                      "LLAMA_POOLING_TYPE_MEAN",
                      "LLAMA_POOLING_TYPE_NONE",
                      "LLAMA_POOLING_TYPE_RANK",
                      "LLAMA_POOLING_TYPE_UNSPECIFIED",
                      "LLAMA_ROPE_SCALING_TYPE_LINEAR",
                      "LLAMA_ROPE_SCALING_TYPE_LONGROPE",
                      "LLAMA_ROPE_SCALING_TYPE_MAX_VALUE",
                      "LLAMA_ROPE_SCALING_TYPE_NONE",
                      "LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED",
                      "LLAMA_ROPE_SCALING_TYPE_YARN",
                      "LLAMA_SPLIT_MODE_LAYER",
                      "LLAMA_SPLIT_MODE_NONE",
                      "LLAMA_SPLIT_MODE_ROW",
                      "LLAMA_SPLIT_MODE_TENSOR",
]
