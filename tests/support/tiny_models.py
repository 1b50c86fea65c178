"""Tiny random-weight llama-architecture GGUF models and LoRA adapters for tests and benchmarks.

The models use llama.cpp's real SentencePiece llama vocabulary (32000 tokens), copied from
``vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf``, so tokenization behaves like a real model.
Everything is seeded: the same spec always produces byte-identical files.

CLI: ``python tests/support/tiny_models.py OUTDIR`` writes model-f32.gguf, model-f16.gguf,
lora-a.gguf and lora-b.gguf.
"""

from __future__ import annotations

import argparse
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

__all__ = [
    "CHATML_TEMPLATE",
    "DEFAULT_VOCAB_PATH",
    "LORA_TARGETS",
    "TinyModelSpec",
    "write_lora",
    "write_model",
]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

DEFAULT_VOCAB_PATH = (
    Path(__file__).resolve().parents[2] / "vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf"
)

# Per-block 2-D weights that a LoRA adapter may target (llama.cpp tensor names).
LORA_TARGETS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")

# Std of the token embeddings; 2-D weights use 1/sqrt(fan_in), the output projection is scaled up
# by OUTPUT_GAIN so logits are spread out (std ~OUTPUT_GAIN) rather than nearly flat.
EMBD_STD = 1.0
OUTPUT_GAIN = 4.0

_VT = gguf.GGUFValueType
_KV = tuple[str, Any, gguf.GGUFValueType, gguf.GGUFValueType | None]


@dataclass(frozen=True)
class TinyModelSpec:
    """Hyper-parameters of a tiny llama model (n_head_kv < n_head gives GQA)."""

    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx_train: int = 2048
    dtype: str = "f32"  # "f32" | "f16" | "q8_0" (1-D norm weights always stay f32)
    seed: int = 0
    chat_template: str | None = CHATML_TEMPLATE
    name: str = "tiny-llama"

    def __post_init__(self) -> None:
        if self.dtype not in ("f32", "f16", "q8_0"):
            raise ValueError(f"dtype must be 'f32', 'f16' or 'q8_0', got {self.dtype!r}")
        if self.n_embd % self.n_head or self.head_dim % 2:
            raise ValueError("n_embd must be divisible by n_head into an even head_dim")
        if self.n_head % self.n_head_kv:
            raise ValueError("n_head must be a multiple of n_head_kv")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def block_weight_shapes(self) -> dict[str, tuple[int, int]]:
        """numpy shapes (out_features, in_features) of the 2-D weights in each block."""
        d, kv, ff = self.n_embd, self.n_head_kv * self.head_dim, self.n_ff
        return {
            "attn_q": (d, d),
            "attn_k": (kv, d),
            "attn_v": (kv, d),
            "attn_output": (d, d),
            "ffn_gate": (ff, d),
            "ffn_up": (ff, d),
            "ffn_down": (d, ff),
        }


@functools.lru_cache(maxsize=4)
def _load_vocab(path: Path) -> tuple[_KV, ...]:
    """All ``tokenizer.ggml.*`` key/values of a vocab GGUF, with their GGUF value types."""
    if not path.is_file():
        raise FileNotFoundError(
            f"llama vocab GGUF not found at {path}; extract llama.cpp into vendor/llama.cpp "
            "or pass vocab_path="
        )
    items: list[_KV] = []
    for key, field in gguf.GGUFReader(path).fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        vtype, sub_type = _VT(field.types[0]), None
        if vtype == _VT.ARRAY:
            sub_type = _VT(field.types[-1])
            if sub_type == _VT.STRING:  # keep raw bytes: tokens need not be valid UTF-8
                value: Any = tuple(bytes(field.parts[i]) for i in field.data)
            else:
                value = tuple(field.contents())
        else:
            value = field.contents()
        items.append((key, value, vtype, sub_type))
    return tuple(items)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)


def _write(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_model(
    path: str | os.PathLike[str],
    spec: TinyModelSpec = TinyModelSpec(),
    *,
    vocab_path: str | os.PathLike[str] | None = None,
    memoryless: bool = False,
) -> Path:
    """Write a random-weight llama model GGUF for ``spec`` to ``path`` and return the path.

    ``memoryless`` zeroes the attention output weights: each next token then depends on the last
    token only, so greedy text runs around a cycle and repeats itself (prompt lookup drafts it).
    """
    path = Path(path)
    vocab = _load_vocab(Path(vocab_path or DEFAULT_VOCAB_PATH).resolve())
    n_vocab = len(next(v for k, v, _, _ in vocab if k == gguf.Keys.Tokenizer.LIST))

    w = gguf.GGUFWriter(path, "llama")
    w.add_name(spec.name)
    w.add_file_type({"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}.get(
        spec.dtype, gguf.LlamaFileType.ALL_F32))
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    for key, value, vtype, sub_type in vocab:
        w.add_key_value(key, value, vtype, sub_type)
    if spec.chat_template is not None:
        w.add_chat_template(spec.chat_template)

    rng = np.random.default_rng(spec.seed)
    wtype = np.float16 if spec.dtype == "f16" else np.float32

    def matrix(name: str, shape: tuple[int, int], std: float) -> None:
        values = _normal(rng, shape, std)
        if spec.dtype == "q8_0":           # blocks of 32 along each row (gguf's reference quantizer)
            q8 = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(values, q8), raw_shape=gguf.quant_shape_to_byte_shape(shape, q8),
                         raw_dtype=q8)
        else:
            w.add_tensor(name, values.astype(wtype))

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(spec.n_embd, dtype=np.float32))

    matrix("token_embd.weight", (n_vocab, spec.n_embd), EMBD_STD)
    for i in range(spec.n_layer):
        norm(f"blk.{i}.attn_norm.weight")
        norm(f"blk.{i}.ffn_norm.weight")
        for t, (n_out, n_in) in spec.block_weight_shapes().items():
            matrix(f"blk.{i}.{t}.weight", (n_out, n_in), 0.0 if memoryless and t == "attn_output" else n_in**-0.5)
    norm("output_norm.weight")
    matrix("output.weight", (n_vocab, spec.n_embd), OUTPUT_GAIN * spec.n_embd**-0.5)
    _write(w)
    return path


def write_lora(
    path: str | os.PathLike[str],
    base_spec: TinyModelSpec = TinyModelSpec(),
    *,
    rank: int = 4,
    alpha: float = 8.0,
    seed: int = 1,
    targets: tuple[str, ...] = LORA_TARGETS,
    arch: str = "llama",
) -> Path:
    """Write a random LoRA adapter GGUF for a model built from ``base_spec``; return the path.

    Unlike a freshly initialised real adapter, ``lora_b`` is non-zero, so the adapter changes the
    logits: with the defaults the update ``alpha/rank * B @ A`` is about as large as the base
    weight. Pass a different ``arch`` (e.g. "gpt2") or ``base_spec`` to get an adapter that
    llama.cpp must reject.
    """
    shapes = base_spec.block_weight_shapes()
    unknown = set(targets) - set(shapes)
    if unknown or not targets:
        raise ValueError(f"targets must be a non-empty subset of {LORA_TARGETS}, got {targets}")
    path = Path(path)
    w = gguf.GGUFWriter(path, arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_name(f"{base_spec.name}-lora")
    w.add_base_model_count(1)
    w.add_base_model_name(0, base_spec.name)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)

    # llama.cpp expects lora_a with ggml ne = [n_in, rank] and lora_b with ne = [rank, n_out],
    # i.e. numpy shapes (rank, n_in) and (n_out, rank); delta W = alpha/rank * B @ A.
    rng = np.random.default_rng(seed)
    b_std = 0.5 * rank**-0.5
    for i in range(base_spec.n_layer):
        for t in targets:
            n_out, n_in = shapes[t]
            w.add_tensor(f"blk.{i}.{t}.weight.lora_a", _normal(rng, (rank, n_in), n_in**-0.5))
            w.add_tensor(f"blk.{i}.{t}.weight.lora_b", _normal(rng, (n_out, rank), b_std))
    _write(w)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    outdir = parser.parse_args(argv).outdir
    outdir.mkdir(parents=True, exist_ok=True)
    spec = TinyModelSpec()
    write_model(outdir / "model-f32.gguf", spec)
    write_model(outdir / "model-f16.gguf", TinyModelSpec(dtype="f16"))
    write_lora(outdir / "lora-a.gguf", spec, seed=1)
    write_lora(outdir / "lora-b.gguf", spec, seed=2)
    for p in sorted(outdir.glob("*.gguf")):
        print(f"{p}: {p.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
