"""Flash attention for a few query rows (vendor/patches/0008): batches of fewer than 64 tokens with
an f16 KV cache (token generation, a speculative verify batch, a few sequences' next tokens) take a
kernel that works through the cache in blocks of 64 keys for all the rows of a group of query heads
at once. It must give what plain attention (flash_attn off, another code path) gives, within the
rounding of the sums: for every row, head and sequence, over a cache of several blocks and a part
of one and over 600 cached tokens (one row there once took ggml's split-KV path), with heads whose
width is no multiple of the vector width, on 1-3 threads. A kernel that
mixed up rows, heads, keys, blocks or masks would move the logits by far more.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from helpers import decode, make_ctx
from tiny_models import TinyModelSpec, write_model

import llamacore

SPECS = {
    # 4 query heads sharing each KV head, heads 24 wide
    "gqa": TinyModelSpec(n_embd=192, n_layer=2, n_head=8, n_head_kv=2, n_ff=256, dtype="f16", seed=11),
    # one KV head per query head, heads 20 wide
    "mha": TinyModelSpec(n_embd=80, n_layer=2, n_head=4, n_head_kv=4, n_ff=160, dtype="f16", seed=12),
}
PROMPT = 150            # cached tokens: two blocks of 64 keys and part of a third


@pytest.fixture(scope="module", params=sorted(SPECS))
def model(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"fa_rows_{request.param}")
    return llamacore.Model(write_model(folder / f"{request.param}.gguf", SPECS[request.param]))


def _logits(model, flash_attn: str, prompts: list[list[int]], rows: list[tuple[int, int]], threads: int) -> np.ndarray:
    """Each sequence's prompt decoded, then one batch of `rows` ((sequence, token) pairs, each
    sequence's rows in order after its prompt), every row with logits."""
    ctx = make_ctx(model, n_ctx=1024, n_batch=256, n_seq_max=len(prompts), kv_unified=True,
                   n_threads=threads, n_threads_batch=threads, flash_attn=flash_attn)
    for seq, prompt in enumerate(prompts):
        for start in range(0, len(prompt), 256):           # n_batch tokens at a time
            decode(ctx, prompt[start:start + 256], start, seq)
    batch = llamacore.Batch(len(rows))
    pos = [len(p) for p in prompts]
    for seq, token in rows:
        batch.add(token, pos[seq], seq, True)
        pos[seq] += 1
    ctx.decode(batch)
    return np.array(ctx.all_logits())


def _assert_close(model, prompts, rows, threads) -> None:
    got = _logits(model, "on", prompts, rows, threads)
    want = _logits(model, "off", prompts, rows, threads)
    scale = float(np.abs(want).max())
    assert np.abs(got - want).max() <= 5e-3 * scale, f"{len(rows)} rows, {threads} threads"


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rows_of_one_sequence_match_plain_attention(model, threads):
    rng = random.Random(threads)
    prompt = [rng.randrange(3, model.n_vocab) for _ in range(PROMPT)]
    for n_rows in (1, 2, 5, 8, 17):
        rows = [(0, rng.randrange(3, model.n_vocab)) for _ in range(n_rows)]
        _assert_close(model, [prompt], rows, threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_of_several_sequences_match_plain_attention(model, threads):
    """Sequences of different lengths in one batch: each row sees its own sequence's keys only."""
    rng = random.Random(10 + threads)
    prompts = [[rng.randrange(3, model.n_vocab) for _ in range(n)] for n in (PROMPT, 20, 90)]
    rows = [(seq, rng.randrange(3, model.n_vocab)) for seq in (0, 1, 2, 2, 0, 1, 2)]
    _assert_close(model, prompts, rows, threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_over_a_long_cache_match_plain_attention(model, threads):
    """One row over 512 cached tokens or more, which took ggml's split-KV path before the kernel
    did, and a few rows: 600 cached tokens in a cache view padded past them."""
    rng = random.Random(20 + threads)
    prompt = [rng.randrange(3, model.n_vocab) for _ in range(600)]
    for n_rows in (1, 3):
        rows = [(0, rng.randrange(3, model.n_vocab)) for _ in range(n_rows)]
        _assert_close(model, [prompt], rows, threads)


def test_a_long_batch_keeps_the_tiled_kernel(model):
    """64 rows or more take ggml's tiled kernel: still what plain attention gives."""
    rng = random.Random(7)
    prompt = [rng.randrange(3, model.n_vocab) for _ in range(PROMPT)]
    rows = [(0, rng.randrange(3, model.n_vocab)) for _ in range(70)]
    _assert_close(model, [prompt], rows, 2)
