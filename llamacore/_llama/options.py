"""The constructor options of `Llama` as llama-cpp-python spells them, checked and translated.

llama-cpp-python takes llama.cpp's integers for enum-like options (split_mode, pooling_type,
attention_type, type_k/type_v, rope_scaling_type); llamacore's Context and Model take names. Both
spellings are accepted here. A parameter is honoured or refused with ValueError, never dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from llamacore import llama_cpp as lc

log = logging.getLogger(__name__)


def option_name(param: str, value: Any, names: Mapping[int, str]) -> str:
    """An option given as llama.cpp's integer (as llama-cpp-python takes it) or as llamacore's name."""
    if isinstance(value, str) and value in names.values():
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value in names:
        return names[value]
    raise ValueError(f"{param}={value!r} is not one of {', '.join(names.values())} "
                     f"(or llama.cpp's values {', '.join(map(str, names))})")


def numa_strategy(numa: bool | int) -> int:
    """llama-cpp-python's `numa` (a bool, or a GGML_NUMA_STRATEGY_* value) applied to this process:
    llama.cpp keeps the first policy set, and on a machine with one NUMA node it changes nothing."""
    from llamacore._core import numa_init

    strategy = (lc.GGML_NUMA_STRATEGY_DISTRIBUTE if numa else lc.GGML_NUMA_STRATEGY_DISABLED) \
        if isinstance(numa, bool) else numa
    if not isinstance(strategy, int) or not 0 <= strategy < lc.GGML_NUMA_STRATEGY_COUNT:
        raise ValueError(f"numa={numa!r} is not a bool or a GGML_NUMA_STRATEGY_* value "
                         f"(0..{lc.GGML_NUMA_STRATEGY_COUNT - 1})")
    numa_init(strategy)
    return strategy


def context_options(*, rope_scaling_type: int | str | None, yarn_ext_factor: float, yarn_attn_factor: float,
                    yarn_beta_fast: float, yarn_beta_slow: float, yarn_orig_ctx: int, op_offload: bool | None,
                    swa_full: bool | None) -> dict[str, Any]:
    """llama-cpp-python's RoPE/YaRN and offload options as Context keywords (None: llama.cpp's default)."""
    scaling = lc.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED if rope_scaling_type is None else rope_scaling_type
    return {"rope_scaling_type": scaling, "yarn_ext_factor": yarn_ext_factor, "yarn_attn_factor": yarn_attn_factor,
            "yarn_beta_fast": yarn_beta_fast, "yarn_beta_slow": yarn_beta_slow, "yarn_orig_ctx": yarn_orig_ctx,
            "op_offload": True if op_offload is None else op_offload,
            "swa_full": True if swa_full is None else swa_full}


def check_unsupported(*, lora_base: Any) -> None:
    """Refuse (ValueError, naming the parameter) the llama-cpp-python options llamacore cannot honour."""
    if lora_base is not None:
        raise ValueError("lora_base is not supported: llama.cpp applies LoRA adapters to the loaded weights and "
                         "takes no separate base model (llama-cpp-python ignores it); leave it None")
