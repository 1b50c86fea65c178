"""A batch's rows equal one-row decodes bitwise (vendor/patches/0012, with 0008 and 0009): the logits
of k tokens decoded as one batch after a prompt are the logits of the same tokens decoded one at a
time. Speculative decoding's greedy answers rest on it: a verify batch (the last token and its
drafts) must pick the tokens plain decoding picks, also where two logits nearly tie, and the keys
and values it leaves in the cache must be those plain decoding leaves.

f16, bf16, f32 and unrepacked IQ4_NL weights, f16 and f32 KV caches, flash attention off
(attention's products go through the matrix kernels), on, and for prompts only; 1 and 2 threads;
batches of 1-12 rows (9 and more take tinyBLAS, which must sum in the same order). Before 0012
every row of a 2-row batch differed from its one-row decode in f16 with flash attention off, by up
to 1e-3 in the logits; before 0014 every row of a 2-row batch in bf16 (tinyBLAS for 2 rows and
more, ggml's dot-product loop for one), by up to 0.05; before 0015 likewise in IQ4_NL weights where
they are not repacked (the dot product summed even and odd blocks apart), by up to 0.15.

Q4_K weights (every matrix; x86 with AVX2 repacks them, vendor/patches/0013): one row takes the
repacked gemv, 4 rows and more the gemm, which before 0013 rounded otherwise, and K-quant
activations are quantized again at every product, so the logits moved by up to 0.3."""

from __future__ import annotations

import pytest
from helpers import assert_batch_rows_equal_one_row_decodes
from tiny_models import TinyModelSpec, write_model

import llamacore
from llamacore.quantize import quantize

# heads 64 wide (a multiple of the vector width, as real models' are), rows of weights a multiple of 32
SPECS = {
    "f16": TinyModelSpec(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, dtype="f16", seed=21),
    "f32": TinyModelSpec(n_embd=128, n_layer=2, n_head=2, n_head_kv=1, n_ff=256, dtype="f32", seed=22),
}
ROWS = (1, 2, 3, 5, 8, 9, 12)


@pytest.fixture(scope="module", params=[*sorted(SPECS), "bf16", "q4_k", "iq4_nl"])
def model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"batch_invariance_{request.param}")
    if request.param in ("bf16", "q4_k", "iq4_nl"):    # the f16 model's weights, every matrix of that type
        f16 = write_model(folder / "f16.gguf", SPECS["f16"])
        ftype = {"bf16": "bf16", "q4_k": "q4_k_m", "iq4_nl": "iq4_nl"}[request.param]
        path = quantize(f16, folder / f"{request.param}.gguf", ftype, pure=True)
        # IQ4_NL as stored: x86 repacks it where the repack buffer type is on
        return llamacore.Model(path, use_extra_bufts=request.param != "iq4_nl")
    return llamacore.Model(write_model(folder / f"{request.param}.gguf", SPECS[request.param]))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("flash_attn", ["off", "on", "prompts"])
def test_batch_rows_equal_one_row_decodes(model, flash_attn, threads):
    kv_type = "f32" if model.path.endswith("f32.gguf") else "f16"
    assert_batch_rows_equal_one_row_decodes(model, ROWS, threads=threads, flash_attn=flash_attn, kv_type=kv_type)
