"""llama-cpp-python's `Llama` constructor parameters on llamacore's (honoured, or refused with a
ValueError naming them) and the llama.cpp constants it takes."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from helpers import N_THREADS

import llamacore
from llamacore import Llama
from llamacore import llama_cpp as lc

PROMPT = "Once upon a time"


# -- constructor parameters --------------------------------------------------------------------


def test_unknown_keyword_is_accepted_with_a_warning(tiny_model_path):
    """A UserWarning at the caller's line, as users of llama-cpp-python's **kwargs see it printed."""
    with pytest.warns(UserWarning) as caught:
        llm = Llama(tiny_model_path, n_ctx=256, n_threads=N_THREADS, n_ctxx=512, not_an_option=1)
    assert [str(w.message) for w in caught] == [
        "Llama(): unknown keyword argument 'n_ctxx' ignored (did you mean 'n_ctx'?)",
        "Llama(): unknown keyword argument 'not_an_option' ignored"]
    assert {w.filename for w in caught} == {__file__}
    assert llm.n_ctx() == 256


def test_numa_policy_is_applied(tiny_model_path):
    assert Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, numa=True).numa == lc.GGML_NUMA_STRATEGY_DISTRIBUTE
    assert Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, numa=False).numa == 0


def test_rope_and_yarn_options_reach_llama_cpp(tiny_model_path):
    """RoPE scaling changes the positions the model sees, so the logits after a prompt change."""
    prompt = [1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366]

    def last_logits(**options):
        llm = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, **options)
        llm.eval(prompt)
        return llm.ctx.logits(-1).copy()
    plain = last_logits()
    assert not np.array_equal(plain, last_logits(rope_scaling_type=lc.LLAMA_ROPE_SCALING_TYPE_LINEAR,
                                                 rope_freq_scale=0.25))
    assert not np.array_equal(plain, last_logits(rope_scaling_type=lc.LLAMA_ROPE_SCALING_TYPE_YARN,
                                                 rope_freq_scale=0.25, yarn_orig_ctx=16))
    np.testing.assert_array_equal(plain, last_logits(op_offload=False, swa_full=False))    # nothing to offload


@pytest.mark.parametrize("name, value", [
    ("rope_scaling_type", 7), ("yarn_orig_ctx", -1), ("yarn_ext_factor", float("nan")),
    ("draft_model", object()), ("lora_base", "base.gguf"), ("split_mode", 7), ("type_k", lc.GGML_TYPE_Q4_K),
    ("type_v", "q4_K"), ("attention_type", 5), ("pooling_type", 9), ("numa", 9), ("last_n_tokens_size", -2),
    ("chat_handler", "chatml"),
])
def test_parameters_it_cannot_honour_are_refused_by_name(tiny_model_path, name, value):
    with pytest.raises(ValueError, match=name):
        Llama(tiny_model_path, n_ctx=64, **{name: value})


def test_integer_options_and_their_names_are_honoured(tiny_model_path, caplog):
    with caplog.at_level(logging.DEBUG, logger="llamacore.llama"):
        llm = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, split_mode=lc.LLAMA_SPLIT_MODE_NONE,
                    type_k=lc.GGML_TYPE_Q8_0, type_v="f32", attention_type=lc.LLAMA_ATTENTION_TYPE_CAUSAL,
                    rope_scaling_type=None, op_offload=True, swa_full=True, spm_infill=True,
                    last_n_tokens_size=32, no_perf=True, flash_attn=False)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert llm.create_completion(PROMPT, max_tokens=3, temperature=0)["usage"]["completion_tokens"] == 3
    assert llm._sampling_params().penalty_last_n == 32
    assert llm.ctx.perf()["n_eval"] == 2 and llm.ctx.perf()["t_eval_ms"] == 0   # no_perf: no timings
    timed = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS)
    timed.create_completion(PROMPT, max_tokens=3, temperature=0)
    assert timed.ctx.perf()["t_eval_ms"] > 0
    emb = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, embedding=True,
                pooling_type=lc.LLAMA_POOLING_TYPE_MEAN)
    assert emb.pooling_type() == lc.LLAMA_POOLING_TYPE_MEAN and emb.ctx.pooling == "mean"
    with pytest.raises(ValueError, match="spm_infill"):
        llm.create_completion(PROMPT, suffix=" the end")


def test_non_causal_attention_type_reaches_the_context(tiny_model_path):
    causal = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS)
    both_ways = Llama(tiny_model_path, n_ctx=64, n_threads=N_THREADS, attention_type="non_causal")
    tokens = causal.tokenize(PROMPT.encode())
    causal.eval(tokens)
    both_ways.eval(tokens)
    assert not np.allclose(causal.ctx.logits(-1), both_ways.ctx.logits(-1))


# -- constants ---------------------------------------------------------------------------------


def test_constants_are_exported_and_match_the_compiled_tables():
    from llamacore import _core

    assert llamacore.LLAMA_SPLIT_MODE_LAYER == 1 and llamacore.GGML_TYPE_Q8_0 == 8
    from llamacore import LLAMA_DEFAULT_SEED, LLAMA_ROPE_SCALING_TYPE_YARN

    assert (LLAMA_DEFAULT_SEED, LLAMA_ROPE_SCALING_TYPE_YARN) == (0xFFFFFFFF, 2)
    assert set(lc.__all__) == {name for name in vars(lc) if name.startswith(("LLAMA_", "GGML_"))}
    assert set(lc.__all__) <= set(llamacore.__all__) <= set(dir(llamacore))
    assert {name: code for code, name in lc.SPLIT_MODE_NAMES.items()} == _core._SPLIT_MODES
    assert {name: code for code, name in lc.POOLING_TYPE_NAMES.items()} == _core.POOLING_TYPES
    assert {name: code for code, name in lc.ATTENTION_TYPE_NAMES.items()} == _core._ATTENTION_TYPES
    assert {name: code for code, name in lc.KV_CACHE_TYPE_NAMES.items()} == _core._KV_CACHE_TYPES
    assert (_core._FLASH_ATTN["auto"], _core._FLASH_ATTN["off"], _core._FLASH_ATTN["on"]) == (
        lc.LLAMA_FLASH_ATTN_TYPE_AUTO, lc.LLAMA_FLASH_ATTN_TYPE_DISABLED, lc.LLAMA_FLASH_ATTN_TYPE_ENABLED)
    for name in lc.__all__:
        if name.startswith("GGML_TYPE_") and name != "GGML_TYPE_COUNT":
            assert _core._ggml_type_name(getattr(lc, name)).lower() == name[len("GGML_TYPE_"):].lower()


def test_constants_match_llama_cpp_python():
    from test_llama_signature import lcp_constants

    theirs = lcp_constants()
    shared = [name for name in lc.__all__ if name in theirs]
    assert len(shared) > 50
    assert {name: getattr(lc, name) for name in shared} == {name: theirs[name] for name in shared}
