"""A tiny random-weight vision projector (mmproj GGUF) for the tiny test models, and test images.

The projector is LLaVA-1.5's "mlp" type, the simplest that libmtmd loads: a small ViT (patch
embedding, pre-norm blocks) and a two-layer MLP into the text model's embedding width. It adds no
special tokens around images, so it needs nothing from the text vocabulary. A 32x32 image with
8x8 patches gives (32/8)^2 = 16 image tokens. Everything is seeded: same arguments, same bytes.

Images are written with Pillow; `pattern_image` gives distinct, deterministic pictures.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import gguf
import numpy as np

__all__ = ["IMAGE_TOKENS", "image_bytes", "pattern_image", "write_projector"]

IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2


def write_projector(path: str | os.PathLike[str], n_embd_text: int = 64, *, seed: int = 7,
                    width: int = 32, n_head: int = 4, n_ff: int = 48, n_block: int = 2,
                    n_hidden: int = 48, image_size: int = IMAGE_SIZE, patch_size: int = PATCH_SIZE) -> Path:
    """Write an "mlp" projector whose output rows have `n_embd_text` values (the text model's
    n_embd: a projector for another width is refused when loaded); returns the path.

    An image becomes (image_size / patch_size)^2 tokens (the defaults: IMAGE_TOKENS); larger sizes
    and widths make encoding cost what it does for real projectors (benchmarks/bench_vision.py)."""
    if image_size <= 0 or patch_size <= 0 or image_size % patch_size:
        raise ValueError(f"image_size {image_size} is not a positive multiple of patch_size {patch_size}")
    path = Path(path)
    rng = np.random.default_rng(seed)
    n_pos = (image_size // patch_size) ** 2

    def linear(n_out: int, n_in: int) -> np.ndarray:
        return rng.standard_normal((n_out, n_in), dtype=np.float32) * np.float32(n_in ** -0.5)

    w = gguf.GGUFWriter(path, "clip")
    w.add_type("mmproj")
    w.add_name("tiny-mlp-projector")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", True)
    for key, value in (("image_size", image_size), ("patch_size", patch_size), ("embedding_length", width),
                       ("feed_forward_length", n_ff), ("block_count", n_block),
                       ("attention.head_count", n_head), ("projection_dim", n_embd_text)):
        w.add_uint32(f"clip.vision.{key}", value)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    zeros, ones = (lambda n: np.zeros(n, np.float32)), (lambda n: np.ones(n, np.float32))
    patch = rng.standard_normal((width, 3, patch_size, patch_size), dtype=np.float32) * np.float32(0.02)
    w.add_tensor("v.patch_embd.weight", patch.astype(np.float16))
    w.add_tensor("v.patch_embd.bias", zeros(width))
    w.add_tensor("v.position_embd.weight",
                 rng.standard_normal((n_pos, width), dtype=np.float32) * np.float32(0.02))
    w.add_tensor("v.pre_ln.weight", ones(width))
    w.add_tensor("v.pre_ln.bias", zeros(width))
    for i in range(n_block):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(f"v.blk.{i}.{name}.weight", linear(width, width))
            w.add_tensor(f"v.blk.{i}.{name}.bias", zeros(width))
        for name in ("ln1", "ln2"):
            w.add_tensor(f"v.blk.{i}.{name}.weight", ones(width))
            w.add_tensor(f"v.blk.{i}.{name}.bias", zeros(width))
        w.add_tensor(f"v.blk.{i}.ffn_up.weight", linear(n_ff, width))
        w.add_tensor(f"v.blk.{i}.ffn_up.bias", zeros(n_ff))
        w.add_tensor(f"v.blk.{i}.ffn_down.weight", linear(width, n_ff))
        w.add_tensor(f"v.blk.{i}.ffn_down.bias", zeros(width))
    w.add_tensor("mm.0.weight", linear(n_hidden, width))
    w.add_tensor("mm.0.bias", zeros(n_hidden))
    w.add_tensor("mm.2.weight", linear(n_embd_text, n_hidden))
    w.add_tensor("mm.2.bias", zeros(n_embd_text))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def pattern_image(kind: int, size: int = IMAGE_SIZE) -> np.ndarray:
    """A deterministic RGB picture (uint8, size x size x 3); different kinds differ everywhere."""
    y, x = np.mgrid[0:size, 0:size]
    rng = np.random.default_rng(1000 + kind)
    base = rng.integers(0, 256, size=(size, size, 3))
    stripes = ((x * (kind + 1) + y * (kind + 3)) % 64) * 4
    return ((base + stripes[..., None]) % 256).astype(np.uint8)


def image_bytes(pixels: np.ndarray, fmt: str = "PNG") -> bytes:
    """`pixels` encoded as PNG, JPEG, GIF or BMP (Pillow)."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format=fmt)
    return out.getvalue()
