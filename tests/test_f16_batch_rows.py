"""A batch of a few rows on an f16 model (a few sequences, a speculative verify batch) gives the
logits that decoding its rows one at a time gives. Products of f16 weights with 2-8 columns take
vendor/patches/0006's kernel on x86 (contiguous chunks of rows, tiles of up to 4 rows,
a tail row by row), 9 and more tinyBLAS, one row ggml's dot product: a kernel that mixed up rows,
columns or a thread's range would move logits by far more than the order of the sums does.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from helpers import make_ctx

import llamacore
from tiny_models import TinyModelSpec, write_model

# 112 wide with one KV head of 14: the K and V products have 14 rows, which the kernel's 4-row tiles
# leave a 2-row tail of, on any number of threads
SPEC = TinyModelSpec(n_embd=112, n_layer=2, n_head=8, n_head_kv=1, n_ff=160, dtype="f16", seed=3)


@pytest.fixture(scope="module")
def f16_model(tmp_path_factory):
    path = write_model(tmp_path_factory.mktemp("f16_rows") / "model-f16.gguf", SPEC)
    return llamacore.Model(path)


def _after_prompt(model, prompt: list[int], threads: int) -> llamacore.Context:
    ctx = make_ctx(model, n_threads=threads, n_threads_batch=threads)
    batch = llamacore.Batch(len(prompt))
    batch.add_sequence(prompt, 0, 0, logits_last=True)
    ctx.decode(batch)
    return ctx


def _one_at_a_time(model, prompt: list[int], rows: list[int], threads: int) -> np.ndarray:
    ctx = _after_prompt(model, prompt, threads)
    out = []
    for i, token in enumerate(rows):
        one = llamacore.Batch(1)
        one.add(token, len(prompt) + i, 0, True)
        ctx.decode(one)
        out.append(np.array(ctx.logits(-1)))
    return np.stack(out)


def _in_one_batch(model, prompt: list[int], rows: list[int], threads: int) -> np.ndarray:
    ctx = _after_prompt(model, prompt, threads)
    together = llamacore.Batch(len(rows))
    for i, token in enumerate(rows):
        together.add(token, len(prompt) + i, 0, True)
    ctx.decode(together)
    return np.array(ctx.all_logits())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rows_in_one_batch_match_rows_one_at_a_time(f16_model, threads):
    rng = random.Random(threads)
    prompt = [rng.randrange(3, f16_model.n_vocab) for _ in range(40)]
    for n_rows in range(2, 11):
        rows = [rng.randrange(3, f16_model.n_vocab) for _ in range(n_rows)]
        alone = _one_at_a_time(f16_model, prompt, rows, threads)
        batched = _in_one_batch(f16_model, prompt, rows, threads)
        assert batched.shape == alone.shape
        scale = float(np.abs(alone).max())
        assert np.abs(batched - alone).max() <= 5e-3 * scale, f"{n_rows} rows, {threads} threads"
        assert (batched.argmax(axis=1) == alone.argmax(axis=1)).all()
