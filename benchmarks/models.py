"""Random-weight llama models for benchmarks, cached in ``benchmarks/.cache/models/``.

Weight values do not change speed, so tests/support/tiny_models.py writes f16 files of realistic
shapes; q8_0 and q4_0 variants are made from them with llama.cpp's ``llama-quantize``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from peer_tools import ROOT, ensure_tool

if str(ROOT) not in sys.path:  # llamacore is built in place in the checkout, not installed
    sys.path.insert(0, str(ROOT))
if str(ROOT / "tests" / "support") not in sys.path:  # the tiny-model writer is test tooling, not llamacore
    sys.path.append(str(ROOT / "tests" / "support"))
from tiny_models import TinyModelSpec, write_lora, write_model
from tiny_vision import image_bytes, pattern_image, write_projector

CACHE = Path(__file__).resolve().parent / ".cache" / "models"

SPECS: dict[str, TinyModelSpec] = {
    # ~4M params (64-dim, 2 layers): a token costs well under a millisecond, so per-token
    # overhead of the API around llama.cpp dominates.
    "tiny": TinyModelSpec(dtype="f16", name="bench-tiny"),
    # ~24M params, 16M of them in the 32000-token embedding and output matrices.
    "small": TinyModelSpec(n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=768,
                           dtype="f16", name="bench-small"),
    # ~155M params: 89M in 8 GQA blocks + 66M in the embedding and output matrices.
    "mid": TinyModelSpec(n_embd=1024, n_layer=8, n_head=16, n_head_kv=4, n_ff=2816,
                         dtype="f16", name="bench-mid"),
    # ~385M params: "mid" with 32 blocks (320M in them). Only as the target of the speculative
    # benchmark's deep sibling pair, whose one-block draft costs a few percent of a target token,
    # as a trained draft does against its target.
    "deep": TinyModelSpec(n_embd=1024, n_layer=32, n_head=16, n_head_kv=4, n_ff=2816,
                          dtype="f16", name="bench-deep"),
}
DTYPES = ("f16", "q8_0", "q4_0")

# The vision projector for a text model (its output width is the model's n_embd): LLaVA-1.5's "mlp"
# type at its real image geometry (336 px, 14 px patches: 576 image tokens) with a narrower ViT
# (6 blocks of width 256, ~19M parameters), so that encoding takes tens of ms on 2 cores.
PROJECTOR = {"width": 256, "n_head": 4, "n_ff": 1024, "n_block": 6, "n_hidden": 256,
             "image_size": 336, "patch_size": 14}


def _log(msg: str) -> None:
    print(f"[models] {msg}", file=sys.stderr, flush=True)


def ensure_model(size: str, dtype: str = "f16") -> Path:
    """Path of the ``size`` model ("small" | "mid") in ``dtype`` ("f16" | "q8_0" | "q4_0")."""
    if size not in SPECS:
        raise ValueError(f"unknown model size {size!r}; expected one of {sorted(SPECS)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {DTYPES}")
    path = CACHE / f"{size}-{dtype}.gguf"
    if path.is_file():
        return path
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # concurrent callers never share a file
    if dtype == "f16":
        _log(f"writing {path.name}")
        write_model(tmp, SPECS[size])
    else:
        source = ensure_model(size, "f16")
        _log(f"quantizing {source.name} -> {path.name}")
        cmd = [str(ensure_tool("llama-quantize")), str(source), str(tmp), dtype.upper()]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    tmp.replace(path)
    return path


def ensure_loras(size: str, count: int = 4, rank: int = 4) -> dict[str, Path]:
    """`count` adapters of `rank` (seeds 1..count) for the SPECS[size] model, cached next to the models."""
    out = {}
    for k in range(1, count + 1):
        path = CACHE / (f"{size}-lora{k}.gguf" if rank == 4 else f"{size}-r{rank}-lora{k}.gguf")
        if not path.is_file():
            CACHE.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            write_lora(tmp, SPECS[size], rank=rank, seed=k)
            tmp.replace(path)
        out[f"l{k}"] = path
    return out


def ensure_projector(size: str) -> Path:
    """An mmproj GGUF (PROJECTOR's shape) for the SPECS[size] model, cached next to the models."""
    g = PROJECTOR
    path = CACHE / f"{size}-mmproj-{g['image_size']}p{g['patch_size']}-w{g['width']}x{g['n_block']}.gguf"
    if not path.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        _log(f"writing {path.name}")
        write_projector(tmp, SPECS[size].n_embd, **PROJECTOR)
        tmp.replace(path)
    return path


def ensure_image() -> Path:
    """A deterministic PNG at the projector's image size (no resizing before encoding)."""
    size = PROJECTOR["image_size"]
    path = CACHE / f"image-{size}.png"
    if not path.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(image_bytes(pattern_image(0, size)))
        tmp.replace(path)
    return path


if __name__ == "__main__":
    print(ensure_model(sys.argv[1] if len(sys.argv) > 1 else "small",
                       sys.argv[2] if len(sys.argv) > 2 else "f16"))
