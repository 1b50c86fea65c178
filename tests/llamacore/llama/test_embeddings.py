"""`Llama` embeddings: pooling modes, normalization, batching several inputs into one decode."""

import numpy as np
import pytest
from helpers import N_THREADS

from llamacore import Llama


@pytest.fixture(scope="module")
def minilm(minilm_path):
    return Llama(minilm_path, embedding=True, n_ctx=512, n_threads=N_THREADS)


def cos(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_minilm_similarity(minilm):
    cat, kitten, stocks = minilm.embed(["A cat sits on the mat.", "A kitten rests on a rug.",
                                        "Stock markets fell sharply today."], normalize=True)
    assert len(cat) == 384
    assert cos(cat, kitten) > cos(cat, stocks) + 0.2
    assert np.linalg.norm(cat) == pytest.approx(1.0, abs=1e-5)


def test_batch_equals_single_and_usage(minilm):
    texts = ["first sentence", "a somewhat longer second sentence here", "third"]
    out = minilm.create_embedding(texts)
    assert [d["index"] for d in out["data"]] == [0, 1, 2]
    for text, item in zip(texts, out["data"]):
        np.testing.assert_allclose(item["embedding"], minilm.create_embedding(text)["data"][0]["embedding"],
                                   atol=1e-4)
    n_tokens = sum(len(minilm.tokenize(t.encode())) for t in texts)
    assert out["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}


@pytest.fixture(scope="module")
def token_rows(tiny_model_path):
    llm = Llama(tiny_model_path, embedding=True, pooling_type="none", n_ctx=256, n_threads=N_THREADS)
    return {text: np.asarray(llm.embed(text)) for text in ("hello world", "the quick brown fox")}


def test_pooling_none_gives_one_vector_per_token(tiny_model_path, token_rows):
    llm = Llama(tiny_model_path, embedding=True, pooling_type="none", n_ctx=256, n_threads=N_THREADS)
    rows = llm.embed("hello world", normalize=True)
    assert len(rows) == len(llm.tokenize(b"hello world")) == len(token_rows["hello world"])
    assert all(np.linalg.norm(r) == pytest.approx(1.0, abs=1e-5) for r in rows)


@pytest.mark.parametrize("pooling,reduce", [("mean", lambda r: r.mean(axis=0)), ("cls", lambda r: r[0]),
                                            ("last", lambda r: r[-1])])
def test_pooled_embedding_reduces_the_token_vectors(tiny_model_path, token_rows, pooling, reduce):
    llm = Llama(tiny_model_path, embedding=True, pooling_type=pooling, n_ctx=256, n_threads=N_THREADS)
    texts = list(token_rows)
    batch = llm.embed(texts)                       # both inputs in one decode
    for text, vector in zip(texts, batch):
        assert len(vector) == llm.n_embd()
        np.testing.assert_allclose(vector, reduce(token_rows[text]), atol=1e-4)


def test_embedding_errors(tiny_model_path):
    llm = Llama(tiny_model_path, embedding=True, pooling_type="mean", n_ctx=64, n_batch=64, n_threads=N_THREADS)
    with pytest.raises(ValueError, match="empty"):
        llm.embed([])
    with pytest.raises(ValueError, match="limit"):
        llm.embed("word " * 100, truncate=False)
    assert len(llm.embed("word " * 100)) == llm.n_embd()           # truncated to n_batch by default
    gen = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS)
    with pytest.raises(ValueError, match="embedding=True"):
        gen.embed("x")
