"""High-level `Llama`: completions, streaming, stop strings, prefix cache, LoRA hot-swap, logprobs."""

import numpy as np
import pytest
from helpers import N_THREADS

from llamacore import Llama
from llamacore.generation.sampling import SamplingParams

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def llm(tiny_model_path, lora_a_path, lora_b_path):
    return Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS,
                 lora_adapters={lora_a_path: 0.0, lora_b_path: 0.0})


def greedy(llm, prompt=PROMPT, n=12, **kw):
    return llm(prompt, max_tokens=n, temperature=0, **kw)


def test_completion_shape_and_usage(llm):
    out = greedy(llm, n=10)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    choice = out["choices"][0]
    assert choice["finish_reason"] == "length" and choice["index"] == 0 and choice["logprobs"] is None
    prompt_tokens = len(llm.tokenize(PROMPT.encode()))
    assert out["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 10,
                            "total_tokens": prompt_tokens + 10}
    assert choice["text"]


def test_greedy_is_reproducible_and_stream_matches(llm):
    a = greedy(llm)["choices"][0]["text"]
    b = greedy(llm)["choices"][0]["text"]
    chunks = list(greedy(llm, stream=True))
    assert a == b
    assert "".join(c["choices"][0]["text"] for c in chunks) == a
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)


def test_prompt_as_tokens_equals_text(llm):
    tokens = llm.tokenize(PROMPT.encode())
    assert greedy(llm, tokens)["choices"][0]["text"] == greedy(llm)["choices"][0]["text"]


def test_stop_string_spanning_tokens_never_leaks(llm):
    full = greedy(llm, n=20)["choices"][0]["text"]
    # A stop string that starts inside one token and ends inside a later one.
    pieces = [llm.model.token_to_piece(t).decode("utf-8", "replace")
              for t in llm.tokenize(full.encode(), add_bos=False)]
    start = len(pieces[0]) + len(pieces[1]) - 1
    stop = full[start:start + 4]
    assert len(stop) == 4
    out = greedy(llm, n=20, stop=[stop])
    assert out["choices"][0]["text"] == full[:full.index(stop)]
    assert out["choices"][0]["finish_reason"] == "stop"
    streamed = "".join(c["choices"][0]["text"] for c in greedy(llm, n=20, stop=[stop], stream=True))
    assert streamed == full[:full.index(stop)] and stop not in streamed


def test_prefix_cache_gives_identical_output(llm, tiny_model_path):
    fresh = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS)
    long_prompt = PROMPT + " there was a little dog"
    expected = greedy(fresh, long_prompt)["choices"][0]["text"]
    llm.reset()
    greedy(llm, PROMPT)                             # caches PROMPT + its continuation
    before = llm.ctx.perf()["n_p_eval"]
    assert greedy(llm, long_prompt)["choices"][0]["text"] == expected
    evaluated = llm.ctx.perf()["n_p_eval"] - before
    assert evaluated < len(llm.tokenize(long_prompt.encode())), "the shared prefix was not reused"


def test_lora_scale_change_matches_fresh_model_and_invalidates_cache(llm, tiny_model_path, lora_a_path):
    base = greedy(llm)["choices"][0]["text"]
    llm.set_lora_adapter_scale(lora_a_path, 0.7)
    try:
        with_a = greedy(llm)["choices"][0]["text"]
    finally:
        llm.set_lora_adapter_scale(lora_a_path, 0.0)
    fresh = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS, lora_adapters={lora_a_path: 0.7})
    assert with_a == greedy(fresh)["choices"][0]["text"]
    assert with_a != base
    assert greedy(llm)["choices"][0]["text"] == base


def test_hot_swap_loop_loads_each_adapter_once(llm, tiny_model_path, lora_a_path, lora_b_path):
    adapters_before = dict(llm._adapters)
    model_before = llm.model
    for active in (str(lora_a_path), str(lora_b_path), str(lora_a_path)):
        for path in llm.lora_adapters:
            llm.set_lora_adapter_scale(path, 1.0 if path == active else 0.0)
        got = greedy(llm)["choices"][0]["text"]
        fresh = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS, lora_adapters={active: 1.0})
        assert got == greedy(fresh)["choices"][0]["text"]
    for path in llm.lora_adapters:
        llm.set_lora_adapter_scale(path, 0.0)
    assert llm.model is model_before
    assert all(llm._adapters[p] is adapters_before[p] for p in adapters_before)
    assert llm.lora_adapters == {str(lora_a_path): 0.0, str(lora_b_path): 0.0}
    with pytest.raises(KeyError):
        llm.set_lora_adapter_scale("not-loaded.gguf", 1.0)


def test_logprobs_and_echo(llm):
    out = greedy(llm, n=4, logprobs=3)
    lp = out["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 4 and len(lp["token_logprobs"]) == 4
    for _chosen, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert len(top) == 3 and value <= 0
        assert max(top.values()) == pytest.approx(value)     # greedy picks the most likely token
    echoed = greedy(llm, n=4, echo=True)["choices"][0]["text"]
    assert echoed.startswith(PROMPT) and echoed[len(PROMPT):] == out["choices"][0]["text"]


def test_seeded_sampling_is_reproducible(llm):
    a = llm(PROMPT, max_tokens=12, temperature=1.2, seed=7)["choices"][0]["text"]
    b = llm(PROMPT, max_tokens=12, temperature=1.2, seed=7)["choices"][0]["text"]
    c = llm(PROMPT, max_tokens=12, temperature=1.2, seed=8)["choices"][0]["text"]
    assert a == b and a != c


def test_context_overflow_and_bad_params(llm):
    with pytest.raises(ValueError, match="exceed context window"):
        llm("word " * 400, max_tokens=4)
    with pytest.raises(ValueError, match="temperature"):
        llm(PROMPT, temperature=-1)
    with pytest.raises(ValueError, match="vocabulary"):
        llm([1, 10**6], max_tokens=2)
    out = llm(PROMPT, max_tokens=0, temperature=0)          # 0 = until the context is full
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["total_tokens"] == llm.n_ctx()


def test_state_save_load_resumes(llm):
    llm.reset()
    greedy(llm)
    state = llm.save_state()
    expected = greedy(llm, PROMPT + " and")["choices"][0]["text"]
    llm.reset()
    llm.load_state(state)
    assert greedy(llm, PROMPT + " and")["choices"][0]["text"] == expected


def test_generate_yields_argmax(llm):
    tokens = llm.tokenize(PROMPT.encode())
    llm.reset()
    llm.eval(tokens)
    expected = int(np.argmax(llm.ctx.logits(-1)))
    assert next(llm.generate(tokens, temp=0)) == expected                     # llama-cpp-python's generate
    assert next(iter(llm._generate(tokens, SamplingParams(temperature=0), max_tokens=1))) == expected
