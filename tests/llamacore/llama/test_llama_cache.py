"""llama-cpp-python's prompt caches: LlamaRAMCache / LlamaDiskCache, LlamaState, Llama.set_cache."""

import numpy as np
import pytest
from helpers import N_THREADS

from llamacore import Llama
from llamacore.llama_cache import BaseLlamaCache, LlamaCache, LlamaDiskCache, LlamaRAMCache, LlamaState

PROMPT = "Once upon a time, in a land far away, there lived"


def state(n_bytes: int, tokens=(1, 2, 3), seed=7) -> LlamaState:
    ids = np.asarray(tokens, dtype=np.intc)
    return LlamaState(ids, np.zeros((1, 4), dtype=np.single), len(ids), bytes([n_bytes % 251]) * n_bytes, n_bytes,
                      seed)


@pytest.fixture(scope="module")
def llm(tiny_model_path):
    return Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS, seed=1234)


def greedy(llm, prompt, n=8):
    return llm(prompt, max_tokens=n, temperature=0)["choices"][0]["text"]


# -- RAM cache ----------------------------------------------------------------------------------


def test_ram_cache_longest_prefix_lookup():
    cache = LlamaRAMCache(capacity_bytes=10_000)
    assert isinstance(cache, BaseLlamaCache) and LlamaCache is LlamaRAMCache
    short, long_, other = state(10), state(20), state(30)
    cache[(1, 2)] = short
    cache[(1, 2, 3, 4)] = long_
    cache[(9, 9)] = other
    assert cache[(1, 2, 3, 4, 5)] is long_         # the longest shared prefix wins
    assert cache[(1, 2, 3)] is long_
    assert cache[(9,)] is other
    # ties go to the first in the cache's order (least recently used), as llama-cpp-python's:
    # after the lookups above that is short, then long_ once short has been used
    assert cache[(1, 2, 7)] is short
    assert cache[(1, 5)] is long_
    assert (1, 8) in cache and (5,) not in cache and () not in cache
    with pytest.raises(KeyError):
        cache[(5, 1, 2)]
    assert cache.cache_size == 60


def test_ram_cache_evicts_least_recently_used_to_capacity():
    cache = LlamaRAMCache(capacity_bytes=100)
    a, b, c = state(40), state(40), state(40)
    cache[(1,)] = a
    cache[(2,)] = b
    assert cache[(1,)] is a                        # a is now the most recently used
    cache[(3,)] = c                                # 120 > 100: b (least recently used) goes
    assert (2,) not in cache and cache[(1,)] is a and cache[(3,)] is c
    assert cache.cache_size == 80
    cache[(3,)] = state(10)                        # replacing a key counts its new size only
    assert cache.cache_size == 50
    cache[(4,)] = state(500)                       # larger than the capacity: nothing can stay
    assert cache.cache_size == 0 and (1,) not in cache and (4,) not in cache


# -- disk cache ---------------------------------------------------------------------------------


def test_disk_cache_persists_across_instances(tmp_path):
    first = LlamaDiskCache(tmp_path / "states", capacity_bytes=1 << 20)
    original = state(64, tokens=(5, 6, 7), seed=99)
    first[(5, 6, 7)] = original
    first[(5, 8)] = state(32, tokens=(5, 8))
    first.close()

    second = LlamaDiskCache(tmp_path / "states", capacity_bytes=1 << 20)
    got = second[(5, 6, 7, 1, 2)]
    assert isinstance(got, LlamaState)
    assert got.input_ids.tolist() == [5, 6, 7] and got.input_ids.dtype == np.intc
    assert got.n_tokens == 3 and got.seed == 99
    assert got.llama_state == original.llama_state and got.llama_state_size == 64
    assert np.array_equal(got.scores, original.scores) and got.scores.dtype == np.single
    assert second[(5, 8, 8)].input_ids.tolist() == [5, 8]
    assert (5,) in second and (6,) not in second
    with pytest.raises(KeyError):
        second[(6, 5)]


def test_disk_cache_evicts_least_recently_used(tmp_path):
    probe = LlamaDiskCache(tmp_path / "probe")
    probe[(1,)] = state(1000)
    entry = probe.cache_size                       # the bytes one such state takes on disk
    assert entry >= 1000

    cache = LlamaDiskCache(tmp_path / "lru", capacity_bytes=2 * entry + entry // 2)
    cache[(1,)] = state(1000, tokens=(1,))
    cache[(2,)] = state(1000, tokens=(2,))
    assert cache[(1,)].input_ids.tolist() == [1]   # (1,) used last, so (2,) goes first
    cache[(3,)] = state(1000, tokens=(3,))
    assert (2,) not in cache and (1,) in cache and (3,) in cache
    assert cache.cache_size <= cache.capacity_bytes


# -- LlamaState through Llama -------------------------------------------------------------------


def test_llama_state_round_trip_gives_identical_logits(llm):
    tokens = llm.tokenize(PROMPT.encode())
    llm.reset()
    llm.eval(tokens)
    expected = llm.ctx.logits(-1).copy()
    next_token = int(np.argmax(expected))
    llm.eval([next_token])                         # the next token, decoded on top of the prompt
    reference = llm.ctx.logits(-1).copy()

    llm.reset()
    llm.eval(tokens)
    saved = llm.save_state()
    assert isinstance(saved, LlamaState)
    assert saved.input_ids.tolist() == tokens and saved.n_tokens == len(tokens) and saved.seed == 1234
    assert saved.llama_state_size == len(saved.llama_state) > 0
    assert saved.scores.shape == (1, llm.n_vocab()) and np.array_equal(saved.scores[0], expected)

    llm.reset()
    llm.eval(llm.tokenize(b"Something else entirely"))
    llm.load_state(saved)
    assert llm.n_tokens == len(tokens) and llm.input_ids[:len(tokens)].tolist() == tokens
    llm.eval([next_token])                         # on top of the loaded prompt
    assert np.array_equal(llm.ctx.logits(-1), reference)


def test_load_state_accepts_old_dict_form(llm):
    llm.reset()
    greedy(llm, PROMPT)
    saved = llm.save_state()
    old_form = {"state": saved["state"], "tokens": saved["tokens"], "key": saved["key"]}
    expected = greedy(llm, PROMPT + " a")
    llm.reset()
    llm.load_state(old_form)
    assert llm.input_ids[:llm.n_tokens].tolist() == saved.input_ids.tolist()
    assert greedy(llm, PROMPT + " a") == expected


# -- set_cache ----------------------------------------------------------------------------------


def decoded(llm) -> int:
    perf = llm.ctx.perf()
    return int(perf["n_p_eval"] + perf["n_eval"])


def test_set_cache_reuses_state_for_shared_prefix(tiny_model_path):
    plain = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    cached = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    cache = LlamaRAMCache(capacity_bytes=1 << 26)
    cached.set_cache(cache)
    assert cached.cache is cache

    first = greedy(cached, PROMPT)
    assert cache.cache_size > 0 and tuple(cached.tokenize(PROMPT.encode())) in cache
    second_prompt = PROMPT + " a small dragon"
    n_prompt = len(cached.tokenize(second_prompt.encode()))

    cached.reset()                                 # the context forgets; the cache still has the state
    cached.ctx.reset_perf()
    second = greedy(cached, second_prompt, n=4)
    reused_run = decoded(cached)

    plain.ctx.reset_perf()
    assert greedy(plain, PROMPT) == first
    plain.reset()
    plain.ctx.reset_perf()
    assert greedy(plain, second_prompt, n=4) == second
    assert decoded(plain) >= n_prompt
    assert reused_run < n_prompt                   # the shared prefix came from the cache


def test_set_cache_disk_across_llama_instances(tiny_model_path, tmp_path):
    one = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    one.set_cache(LlamaDiskCache(tmp_path / "c"))
    expected = greedy(one, PROMPT)
    two = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    two.set_cache(LlamaDiskCache(tmp_path / "c"))
    two.ctx.reset_perf()
    assert greedy(two, PROMPT) == expected
    assert decoded(two) < len(two.tokenize(PROMPT.encode())) + 8


def test_set_cache_none_disables(llm):
    llm.set_cache(LlamaRAMCache())
    llm.set_cache(None)
    assert llm.cache is None
    assert greedy(llm, PROMPT) == greedy(llm, PROMPT)


# -- prompts with images ------------------------------------------------------------------------


def test_states_with_image_placeholders(tmp_path):
    from llamacore.vision.prompt import placeholder

    image_row = placeholder("ab" * 32, 0)          # far below any intc
    held = LlamaState(np.asarray([1, image_row], dtype=object), np.zeros((0, 4), dtype=np.single), 2, b"x", 1, None)
    ram = LlamaRAMCache()
    ram[(1, image_row)] = held
    assert ram[(1, image_row, 5)] is held and held.tokens == [1, image_row]
    disk = LlamaDiskCache(tmp_path / "d")
    disk[(1, image_row)] = held                    # not storable as int64 ids: skipped, not an error
    assert (1,) not in disk and disk.cache_size == 0


def test_set_cache_with_an_image_chat(tiny_model_path, projector_path, tmp_path):
    import base64

    from tiny_vision import image_bytes, pattern_image

    url = "data:image/png;base64," + base64.b64encode(image_bytes(pattern_image(1), "PNG")).decode()
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                             {"type": "image_url", "image_url": {"url": url}}]}]
    llm = Llama(tiny_model_path, clip_model_path=projector_path, n_ctx=512, n_threads=N_THREADS, seed=1)
    expected = llm.create_chat_completion(messages, temperature=0, max_tokens=4)["choices"][0]["message"]["content"]
    for cache in (LlamaRAMCache(), LlamaDiskCache(tmp_path / "img")):
        llm.set_cache(cache)
        llm.reset()
        for _ in range(2):
            out = llm.create_chat_completion(messages, temperature=0, max_tokens=4)
            assert out["choices"][0]["message"]["content"] == expected
        assert isinstance(llm.save_state(), LlamaState)
