"""A batch of a few rows (a few sequences, a speculative verify batch) gives the logits that
decoding its rows one at a time gives, on f16, q8_0 and q4_0 models. On x86, products of f16 weights
with 1-8 columns take vendor/patches/0006's kernel (with 0012's one-column tile), of q8_0 and
unrepacked q4_0 weights with 2-8 columns 0007's (contiguous chunks of rows, tiles of up to 4 rows, a
tail row by row), more columns tinyBLAS, one row of q8_0 or q4_0 ggml's dot product. On CPUs with
AMX, f16 weights whose matrices have a multiple of 32 rows take ggml's AMX buffer type, where
products of up to 8 rows take vendor/patches/0009's kernel (blocks of 6 weight rows with 2- and
4-row tails, every row block per weight block): the "f16-wide" model's every matrix does. A kernel
that mixed up rows, columns, blocks or a thread's range would move logits by far more than the
order of the sums does.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from helpers import logits_in_one_batch, logits_one_at_a_time, make_ctx
from tiny_models import TinyModelSpec, write_model

import llamacore
from llamacore.quantize import quantize

SPECS = {
    # 112 wide with one KV head of 14: the K and V products have 14 rows, which the kernel's 4-row
    # tiles leave a 2-row tail of, on any number of threads
    "f16": TinyModelSpec(n_embd=112, n_layer=2, n_head=8, n_head_kv=1, n_ff=160, dtype="f16", seed=3),
    # every matrix 32-row aligned (AMX CPUs: the AMX buffer type), 128 and 32000 rows leaving 2-row
    # tails of 6-row weight blocks and 160 a 4-row tail; elsewhere 0006's kernel, as "f16"
    "f16-wide": TinyModelSpec(n_embd=128, n_layer=2, n_head=4, n_head_kv=1, n_ff=160, dtype="f16", seed=7),
    # q8_0 rows are blocks of 32: 96 wide with one KV head of 12, whose 4-row chunks the kernel's
    # 3-row tiles (5-6 columns) leave a 1-row tail of
    "q8_0": TinyModelSpec(n_embd=96, n_layer=2, n_head=8, n_head_kv=1, n_ff=160, dtype="q8_0", seed=5),
}


@pytest.fixture(scope="module", params=[*sorted(SPECS), "q4_0"])
def model(request, tmp_path_factory):
    dtype = request.param
    folder = tmp_path_factory.mktemp(f"{dtype}_rows")
    if dtype != "q4_0":
        return llamacore.Model(write_model(folder / f"model-{dtype}.gguf", SPECS[dtype]))
    # q4_0 as loaded without repacking (which x86 takes by default): 0007's kernel, like q8_0's
    source = write_model(folder / "model-f32.gguf", replace(SPECS["q8_0"], dtype="f32"))
    quantize(source, folder / "model-q4_0.gguf", "q4_0", pure=True)    # every matrix q4_0
    return llamacore.Model(folder / "model-q4_0.gguf", use_extra_bufts=False)


def _after_prompt(model, prompt: list[int], threads: int) -> llamacore.Context:
    ctx = make_ctx(model, n_threads=threads, n_threads_batch=threads)
    batch = llamacore.Batch(len(prompt))
    batch.add_sequence(prompt, 0, 0, logits_last=True)
    ctx.decode(batch)
    return ctx


def _one_at_a_time(model, prompt: list[int], rows: list[int], threads: int) -> np.ndarray:
    return logits_one_at_a_time(_after_prompt(model, prompt, threads), rows, len(prompt))


def _in_one_batch(model, prompt: list[int], rows: list[int], threads: int) -> np.ndarray:
    return logits_in_one_batch(_after_prompt(model, prompt, threads), rows, len(prompt))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rows_in_one_batch_match_rows_one_at_a_time(model, threads):
    rng = random.Random(threads)
    prompt = [rng.randrange(3, model.n_vocab) for _ in range(40)]
    for n_rows in range(2, 11):
        rows = [rng.randrange(3, model.n_vocab) for _ in range(n_rows)]
        alone = _one_at_a_time(model, prompt, rows, threads)
        batched = _in_one_batch(model, prompt, rows, threads)
        assert batched.shape == alone.shape
        scale = float(np.abs(alone).max())
        assert np.abs(batched - alone).max() <= 5e-3 * scale, f"{n_rows} rows, {threads} threads"
        assert (batched.argmax(axis=1) == alone.argmax(axis=1)).all()
