"""llama-cpp-python's `Llama` API on llamacore's: the token-level methods (eval, sample, generate,
input_ids, scores), seeds, caches, tokenizers, chat handlers and closing (the constructor's
parameters and constants: test_llama_params.py)."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
from helpers import N_THREADS

import llamacore
from llamacore import Llama
from llamacore import llama_cpp as lc

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def llm(tiny_model_path):
    return Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)


@pytest.fixture(scope="module")
def llm_all(tiny_model_path):
    """logits_all=True: every evaluated token's logits land in `scores`."""
    return Llama(tiny_model_path, n_ctx=128, n_threads=N_THREADS, logits_all=True)


def greedy_text(llm, tokens, n):
    return llm.create_completion(tokens, max_tokens=n, temperature=0)["choices"][0]["text"]


# -- generate / eval / sample ------------------------------------------------------------------


def test_generate_yields_the_greedy_tokens_of_create_completion(llm):
    tokens = llm.tokenize(PROMPT.encode())
    expected = greedy_text(llm, tokens, 8)
    out = list(itertools.islice(llm.generate(tokens, temp=0), 8))
    assert all(isinstance(t, int) for t in out)
    assert llm.detokenize(out).decode("utf-8", "replace") == expected
    # it keeps going for as long as the caller iterates (no max_tokens; stopping is the caller's)
    longer = list(itertools.islice(llm.generate(tokens, temp=0), 20))
    assert longer[:8] == out and len(longer) == 20
    # the context holds the prompt and every token decoded (the last yielded one is not yet)
    assert llm.n_tokens == len(tokens) + 19 and llm.input_ids[:len(tokens)].tolist() == tokens


def test_generate_reset_false_continues_after_what_the_context_holds(llm):
    tokens = llm.tokenize(PROMPT.encode())
    whole = list(itertools.islice(llm.generate(tokens, temp=0), 6))
    llm.reset()
    llm.eval(tokens[:2])
    assert list(itertools.islice(llm.generate(tokens[2:], temp=0, reset=False), 6)) == whole
    with pytest.raises(ValueError, match="empty"):
        next(llm.generate([], temp=0))


def test_generate_stopping_criteria_stop_before_yielding(llm):
    tokens = llm.tokenize(PROMPT.encode())
    whole = list(itertools.islice(llm.generate(tokens, temp=0), 5))
    seen = []

    def third(input_ids, logits):
        seen.append((len(input_ids), logits.shape))
        return len(seen) == 3

    assert list(llm.generate(tokens, temp=0, stopping_criteria=third)) == whole[:2]
    assert [n for n, _ in seen] == [len(tokens), len(tokens) + 1, len(tokens) + 2]
    assert seen[0][1] == (llm.n_vocab(),)


def test_generate_verifies_tokens_sent_into_it(llm):
    """llama-cpp-python's draft protocol: tokens sent after a yield are evaluated with it; the ones
    the model confirms come out next without another decode, the first one it does not is dropped."""
    tokens = llm.tokenize(PROMPT.encode())
    whole = list(itertools.islice(llm.generate(tokens, temp=0), 8))
    for draft in (whole[1:4], [whole[1], (whole[2] + 1) % llm.n_vocab(), whole[3]]):
        gen = llm.generate(tokens, temp=0)
        got = [next(gen), gen.send(draft)]
        got += list(itertools.islice(gen, 6))
        assert got == whole
    with pytest.raises(ValueError, match="n_batch"):
        gen = llm.generate(tokens, temp=0)
        next(gen)
        gen.send([1] * llm.n_batch)


def test_eval_appends_and_input_ids_n_tokens_follow(llm):
    tokens = llm.tokenize(PROMPT.encode())
    llm.reset()
    assert llm.n_tokens == 0
    llm.eval(tokens)
    whole = llm.ctx.logits(-1).copy()
    llm.reset()
    llm.eval(tokens[:2])
    llm.eval(tokens[2:])                          # appended after the first two, no reset
    assert llm.n_tokens == len(tokens)
    ids = llm.input_ids
    assert ids.dtype == np.intc and ids.shape == (llm.n_ctx(),) and ids[:llm.n_tokens].tolist() == tokens
    assert list(llm.eval_tokens) == tokens
    np.testing.assert_allclose(llm.ctx.logits(-1), whole, rtol=1e-4, atol=1e-4)
    llm.n_tokens = 2                              # forget the rest, as llama-cpp-python's attribute does
    llm.eval(tokens[2:])
    np.testing.assert_allclose(llm.ctx.logits(-1), whole, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="n_tokens"):
        llm.n_tokens = llm.n_tokens + 1
    with pytest.raises(ValueError, match="context window"):
        llm.eval([1] * llm.n_ctx())


def test_scores_hold_every_tokens_logits_with_logits_all(llm_all):
    llm = llm_all
    tokens = llm.tokenize(PROMPT.encode())
    llm.reset()
    llm.eval(tokens)
    assert llm.scores.shape == (llm.n_ctx(), llm.n_vocab()) and llm.scores.dtype == np.single
    np.testing.assert_array_equal(llm.scores[len(tokens) - 1], llm.ctx.logits(-1))
    for i in range(1, len(tokens)):               # row i: the logits after tokens[:i + 1]
        llm.reset()
        llm.eval(tokens[:i + 1])
        np.testing.assert_allclose(llm.scores[i], llm.ctx.logits(-1), rtol=1e-4, atol=1e-4)
    assert len(llm.eval_logits) == llm.n_tokens
    # sampling at an earlier index reads that row (greedy: its argmax)
    llm.reset()
    llm.eval(tokens)
    assert llm.sample(temp=0, idx=1) == int(np.argmax(llm.scores[1]))
    # completions fill the rows of the tokens they decode too
    llm.reset()
    llm.create_completion(tokens, max_tokens=4, temperature=0)
    n = llm.n_tokens
    assert n >= len(tokens) + 3 and np.abs(llm.scores[:n]).sum(axis=1).min() > 0
    state = llm.save_state()
    assert state.scores.shape == (n, llm.n_vocab())


def test_scores_without_logits_all_is_lcps_unused_buffer(llm):
    assert llm.scores.shape == (llm.n_batch, llm.n_vocab()) and llm.scores.dtype == np.single


def test_sample_from_current_logits(llm):
    tokens = llm.tokenize(PROMPT.encode())
    llm.reset()
    with pytest.raises(ValueError, match="eval"):
        llm.sample()
    llm.eval(tokens)
    assert llm.sample(temp=0) == int(np.argmax(llm.ctx.logits(-1)))
    target = 7

    def only_target(input_ids, scores):
        assert input_ids.tolist() == tokens
        out = np.full_like(scores, -np.inf)
        out[target] = 0.0
        return out

    assert llm.sample(temp=0.8, logits_processor=only_target) == target
    assert 0 <= llm.sample(temp=-1.0) < llm.n_vocab()       # lcp: temp < 0 samples the whole distribution
    for bad in ({"penalize_nl": False}, {"tfs_z": 0.5}, {"mirostat_mode": 3}, {"top_p": 2.0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            llm.sample(**bad)


def test_set_seed_makes_sampling_repeatable(llm):
    tokens = llm.tokenize(PROMPT.encode())

    def draw(seed):
        llm.set_seed(seed)
        return list(itertools.islice(llm.generate(tokens, temp=1.5, top_k=0, top_p=1.0, min_p=0.0), 12))

    a, b, others = draw(5), draw(5), [draw(s) for s in (6, 7, 8)]
    assert a == b and any(o != a for o in others)
    llm.set_seed(11)
    texts = {llm.create_completion(PROMPT, max_tokens=12, temperature=1.5)["choices"][0]["text"] for _ in range(2)}
    assert len(texts) == 1
    llm.set_seed(lc.LLAMA_DEFAULT_SEED)


# -- model facts, tokenizers -------------------------------------------------------------------


def test_model_facts_and_static_helpers(llm):
    assert llm.token_nl() == llm.model.token_nl
    assert llm.pooling_type() == lc.LLAMA_POOLING_TYPE_NONE          # a causal model: llama.cpp's "none"
    logits = np.array([[1.0, 2.0, 3.0], [0.0, -np.inf, 0.0]], dtype=np.single)
    expected = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    np.testing.assert_allclose(Llama.logits_to_logprobs(logits), expected, rtol=1e-6)
    assert Llama.longest_token_prefix([1, 2, 3], [1, 2, 4]) == 2 and Llama.longest_token_prefix([], [1]) == 0
    # one version: the installed distribution's metadata, the package, the server and its OpenAPI document
    from importlib.metadata import version

    import llamaserve
    from llamaserve.api.openapi import openapi_schema
    assert llamacore.__version__ == version("llamacore") == llamaserve.__version__
    assert openapi_schema()["info"]["version"] == llamacore.__version__


def test_tokenizer_object_and_a_custom_tokenizer(tiny_model_path, llm):
    tok = llm.tokenizer()
    ids = tok.tokenize(PROMPT.encode())
    assert ids == llm.tokenize(PROMPT.encode()) and tok.decode(ids) == llm.detokenize(ids).decode()
    assert tok.encode(PROMPT) == llm.tokenize(PROMPT.encode(), special=True)

    class Counting:
        def __init__(self, inner):
            self.inner, self.calls = inner, []

        def tokenize(self, text, add_bos=True, special=True):
            self.calls.append(("tokenize", text))
            return self.inner.tokenize(text, add_bos, special)

        def detokenize(self, tokens, prev_tokens=None, special=False):
            self.calls.append(("detokenize", list(tokens)))
            return self.inner.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    custom = Counting(tok)
    other = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, tokenizer=custom)
    assert other.tokenize(PROMPT.encode()) == ids and other.detokenize(ids) == llm.detokenize(ids)
    other.create_completion(PROMPT, max_tokens=1, temperature=0)
    assert [c[0] for c in custom.calls] == ["tokenize", "detokenize", "tokenize"]
    with pytest.raises(ValueError, match="tokenizer"):
        Llama(tiny_model_path, n_ctx=64, tokenizer=object())


# -- state, cache ------------------------------------------------------------------------------


def test_save_state_is_a_llama_state(llm):
    from llamacore.llama_cache import LlamaState

    tokens = llm.tokenize(PROMPT.encode())
    llm.reset()
    llm.eval(tokens)
    state = llm.save_state()
    assert isinstance(state, LlamaState) and state.n_tokens == len(tokens)
    assert state.input_ids[:state.n_tokens].tolist() == tokens
    llm.reset()
    llm.load_state(state)              # a state holds no logits: sample() decodes the last token again
    assert llm.n_tokens == len(tokens) and llm.sample(temp=0) == int(np.argmax(state.scores[-1]))
    llm.load_state(state)
    assert next(llm.generate([], temp=0, reset=False)) == int(np.argmax(state.scores[-1]))


def test_set_cache_restores_the_longest_cached_prefix(llm, monkeypatch):
    from llamacore.llama_cache import LlamaRAMCache

    cache = LlamaRAMCache()
    llm.set_cache(cache)
    try:
        llm.reset()
        first = llm.create_completion(PROMPT, max_tokens=6, temperature=0)["choices"][0]["text"]
        assert len(cache.cache_state) == 1
        (key, state), = cache.cache_state.items()
        assert list(key) == state.input_ids[:state.n_tokens].tolist()
        loads = []
        original = llm.load_state
        monkeypatch.setattr(llm, "load_state", lambda s: (loads.append(s), original(s)))
        llm.reset()                                   # the context forgot it: the cache has it
        again = llm.create_completion(PROMPT, max_tokens=6, temperature=0)["choices"][0]["text"]
        assert again == first and loads == [state]
        llm.create_completion(PROMPT, max_tokens=6, temperature=0)   # the context holds more: no load
        assert len(loads) == 1
        streamed = LlamaRAMCache()
        llm.set_cache(streamed)
        assert "".join(c["choices"][0]["text"] for c in llm.create_completion(
            PROMPT, max_tokens=6, temperature=0, stream=True)) == first
        assert len(streamed.cache_state) == 1                      # a stream's state is stored too
    finally:
        llm.set_cache(None)


# -- lifetime ----------------------------------------------------------------------------------


def test_close_and_context_manager(tiny_model_path):
    with Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS) as llm:
        assert llm.create_completion(PROMPT, max_tokens=2, temperature=0)["usage"]["completion_tokens"] == 2
    with pytest.raises(RuntimeError, match="closed"):
        llm.create_completion(PROMPT, max_tokens=2)
    with pytest.raises(RuntimeError, match="closed"):
        llm.n_vocab()
    llm.close()                                       # again: nothing happens


def test_pickle_loads_the_model_again(tiny_model_path):
    llm = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, seed=3, last_n_tokens_size=16)
    copy = pickle.loads(pickle.dumps(llm))
    assert copy is not llm and copy.model_path == llm.model_path and copy.n_ctx() == llm.n_ctx()
    assert copy.seed == 3 and copy.last_n_tokens_size == 16


# -- chat handlers -----------------------------------------------------------------------------


def test_callable_chat_handler_gets_the_request(tiny_model_path):
    calls = []

    def handler(**kwargs):
        calls.append(kwargs)
        return {"id": "chatcmpl-x", "object": "chat.completion", "choices": []}

    llm = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, chat_handler=handler)
    messages = [{"role": "user", "content": "Hi"}]
    assert llm.create_chat_completion(messages, max_tokens=3)["id"] == "chatcmpl-x"
    (call,) = calls
    assert call["llama"] is llm and call["messages"] is messages and call["max_tokens"] == 3
    assert call["temperature"] == 0.2 and call["logprobs"] is None and "ignore_eos" not in call
    with pytest.raises(ValueError, match="reasoning_format"):
        llm.create_chat_completion(messages, reasoning_format="deepseek")


def test_chat_completion_openai_v1(llm):
    pytest.importorskip("openai")
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    messages = [{"role": "user", "content": "Hi"}]
    out = llm.create_chat_completion_openai_v1(messages, max_tokens=3, temperature=0)
    assert isinstance(out, ChatCompletion) and out.choices[0].message.role == "assistant"
    chunks = list(llm.create_chat_completion_openai_v1(messages, max_tokens=3, temperature=0, stream=True))
    assert chunks and all(isinstance(c, ChatCompletionChunk) for c in chunks)
