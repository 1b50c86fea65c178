"""How many rows a batch may have for ggml to compute each of them bitwise as it computes that row
alone: what speculative decoding's greedy answers rest on (a verify batch must pick the tokens
plain decoding picks, also where two logits nearly tie).

On x86, ggml takes products of some weight types (TILED_TYPES: Q2_K-Q6_K and the i-quants but
IQ4_NL) with 8 rows or more to its tiled kernels (ggml-cpu/tiled, `ggml_tiled_min_batch`), which
round every block's sums otherwise than the one-row kernels do. Every other type, and those under
8 rows, give the same bits for a row in a batch of any size (vendor/patches/0012-0015). Q4_K_M
files hold Q6_K tensors, and `llama-quantize` gives even q4_0 files a Q6_K output layer.
"""

from __future__ import annotations

import os
import platform
import re
from os import PathLike

from llamacore.gguf.check import tensor_types

__all__ = ["TILED_EXACT_ROWS", "TILED_TYPES", "X86", "exact_rows"]

X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
TILED_TYPES = frozenset({10, 11, 12, 13, 14, 16, 17, 18, 19, 21, 22, 23, 29})     # ggml_type ids
TILED_EXACT_ROWS = 7


def exact_rows(model: str | PathLike[str]) -> int | None:
    """The most rows a batch of `model` may have for each row to be computed as alone: 7 on x86 where
    the file holds weights of TILED_TYPES and `GGML_CPU_TILED_MM` is not 0 (read as ggml reads it,
    with C's atoi); None for any number."""
    if not X86:
        return None
    switch = re.match(r"\s*([+-]?\d+)", os.environ.get("GGML_CPU_TILED_MM", "1"))
    if not switch or int(switch[1]) == 0:
        return None
    types = tensor_types(model)
    if types is not None and TILED_TYPES.isdisjoint(types):
        return None
    return TILED_EXACT_ROWS
