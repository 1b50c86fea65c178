"""Quantize a GGUF model to another weight type (llama.cpp's llama_model_quantize, as llama-quantize).

The arguments are checked in Python first: an unknown type name, a missing or non-model input and
an output that would overwrite the input raise before llama.cpp is called.
"""

from __future__ import annotations

import os
from pathlib import Path

from llamacore import _core
from llamacore.gguf.check import check_gguf_file

# llama_ftype values (llama.h) by the names llama-quantize takes, lower-cased
FTYPES: dict[str, int] = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9,
    "q2_k": 10, "q3_k_s": 11, "q3_k_m": 12, "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15,
    "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18, "iq2_xxs": 19, "iq2_xs": 20, "q2_k_s": 21,
    "iq3_xs": 22, "iq3_xxs": 23, "iq1_s": 24, "iq4_nl": 25, "iq3_s": 26, "iq3_m": 27,
    "iq2_s": 28, "iq2_m": 29, "iq4_xs": 30, "iq1_m": 31, "bf16": 32, "tq1_0": 36, "tq2_0": 37,
}
# types llama.cpp refuses without an importance matrix (it aborts on some of them)
NEEDS_IMATRIX = frozenset({"iq2_xxs", "iq2_xs", "iq2_s", "iq1_s", "iq1_m"})


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], ftype: str | int = "q4_0", *,
             threads: int = 0, allow_requantize: bool = False, quantize_output_tensor: bool = True,
             pure: bool = False) -> Path:
    """Write `src` quantized to `ftype` (a name such as "q4_0", or a llama_ftype integer) at `dst`.

    threads 0 uses every core; `pure` gives every tensor the one type (no per-tensor mix);
    `allow_requantize` lets an already quantized input be quantized again (quality suffers).
    """
    name = _ftype_name(ftype)
    if name in NEEDS_IMATRIX:
        raise ValueError(f"quantizing to {name} needs an importance matrix, which this function "
                         "does not take; use llama-quantize --imatrix")
    if threads < 0:
        raise ValueError(f"threads must be >= 0 (0 = every core), not {threads}")
    src_path = Path(check_gguf_file(src, "model"))
    dst_path = Path(dst)
    if dst_path.exists() and dst_path.resolve() == src_path.resolve():
        raise ValueError(f"the output {dst_path} is the input: write the quantized model elsewhere")
    if not dst_path.parent.is_dir():
        raise FileNotFoundError(f"the output's folder {dst_path.parent} does not exist")
    _core.model_quantize(str(src_path), str(dst_path), FTYPES[name], threads, allow_requantize,
                         quantize_output_tensor, pure)
    return dst_path


def _ftype_name(ftype: str | int) -> str:
    if isinstance(ftype, bool) or not isinstance(ftype, (str, int)):
        raise TypeError(f"ftype must be a type name or a llama_ftype integer, not {ftype!r}")
    if isinstance(ftype, int):
        for name, value in FTYPES.items():
            if value == ftype:
                return name
        raise ValueError(f"ftype {ftype} is not a llama_ftype this build quantizes to")
    name = ftype.lower()
    if name not in FTYPES:
        raise ValueError(f"unknown quantization type {ftype!r}; one of: {', '.join(FTYPES)}")
    return name
