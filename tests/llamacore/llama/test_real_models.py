"""Real trained models from ../shared/models (skipped when that folder is absent).

stories260K (a llama model trained on TinyStories) must generate English; all-MiniLM-L6-v2
(BERT) must embed similar sentences closer than unrelated ones, also when batched.
"""

import re

import numpy as np
import pytest
from helpers import greedy_generate, make_ctx

import llamacore


def test_stories_greedy_is_english(stories_path):
    model = llamacore.Model(stories_path)
    assert model.architecture == "llama"
    assert model.n_vocab == 512
    ctx = make_ctx(model)
    tokens = model.tokenize("Once upon a time")
    assert tokens[0] == model.token_bos
    out = greedy_generate(ctx, model, "Once upon a time", 40)
    text = model.detokenize(out).decode("utf-8")
    letters = sum(ch.isascii() and (ch.isalpha() or ch.isspace()) for ch in text)
    assert letters / len(text) > 0.85, text
    words = set(re.findall(r"[a-z]+", text.lower()))
    assert words & {"the", "was", "a", "there", "she", "he", "to"}, text
    assert len(words) >= 8, text
    # deterministic: a second fresh context generates the same story
    assert greedy_generate(make_ctx(model), model, "Once upon a time", 40) == out


def _unit(v):
    return v / np.linalg.norm(v)


MINILM_SENTENCES = [
    "A man is playing a guitar.",
    "Someone is playing an instrument.",
    "The stock market fell sharply today.",
]


@pytest.fixture(scope="module")
def minilm(minilm_path):
    return llamacore.Model(minilm_path)


def embed(ctx, model, text, seq_id=0):
    tokens = model.tokenize(text)
    b = llamacore.Batch(len(tokens))
    b.add_sequence(tokens, 0, seq_id, logits_all=True)
    ctx.kv_clear()
    ctx.encode(b)
    return ctx.sequence_embedding(seq_id).copy()


def test_minilm_mean_pooled_embedding(minilm):
    assert minilm.architecture == "bert"
    assert minilm.n_embd == 384
    ctx = make_ctx(minilm, n_ctx=512, n_batch=512, embeddings=True, pooling="mean")
    assert ctx.pooling == "mean"
    vecs = [embed(ctx, minilm, s) for s in MINILM_SENTENCES]
    assert all(v.shape == (384,) and v.dtype == np.float32 for v in vecs)
    assert all(np.isfinite(v).all() and np.linalg.norm(v) > 0 for v in vecs)

    def cos(a, b):
        return float(_unit(a) @ _unit(b))

    similar, unrelated_1, unrelated_2 = cos(vecs[0], vecs[1]), cos(vecs[0], vecs[2]), cos(vecs[1], vecs[2])
    assert similar > unrelated_1 + 0.1 and similar > unrelated_2 + 0.1, (similar, unrelated_1, unrelated_2)
    # the same text embeds identically again
    np.testing.assert_array_equal(embed(ctx, minilm, MINILM_SENTENCES[0]), vecs[0])


def test_minilm_three_sequences_in_one_batch(minilm):
    # n_seq_max=3 with mean pooling: llama.cpp used to abort in context creation when
    # min(n_ctx, n_ubatch) was not a multiple of n_seq_max; the binding rounds n_ubatch down
    single = make_ctx(minilm, n_ctx=512, n_batch=512, embeddings=True, pooling="mean")
    alone = [embed(single, minilm, s) for s in MINILM_SENTENCES]
    ctx = make_ctx(minilm, n_ctx=512, n_batch=512, embeddings=True, pooling="mean", n_seq_max=3)
    assert ctx.n_ubatch % 3 == 0
    toks = [minilm.tokenize(s) for s in MINILM_SENTENCES]
    b = llamacore.Batch(sum(map(len, toks)), n_seq_max=3)
    for seq, t in enumerate(toks):
        b.add_sequence(t, 0, seq, logits_all=True)
    ctx.encode(b)
    for seq in range(3):
        got = ctx.sequence_embedding(seq)
        assert float(_unit(got) @ _unit(alone[seq])) > 0.999, seq
