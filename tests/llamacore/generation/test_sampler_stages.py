"""llama-server's samplers beyond OpenAI's (DRY, XTC, top-n-sigma, dynamic temperature, mirostat 1,
min_keep) as stages of the chain, in llama-server's order, and bad values refused by name (what they
do to a seeded answer: tests/llamaserve/api/test_llama_server_samplers.py)."""

from __future__ import annotations

import pytest

from llamacore.generation.sampling import SamplingParams, sampler_order

EXTRAS = [{"dry_multiplier": 0.8, "dry_allowed_length": 1}, {"xtc_probability": 1.0, "xtc_threshold": 0.01},
          {"top_n_sigma": 0.5}, {"dynatemp_range": 0.7}, {"mirostat_mode": 1}, {"min_keep": 5, "min_p": 0.9}]


@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: next(iter(e)))
def test_each_sampler_is_a_stage_of_the_chain(tiny_model, extra):
    chain = SamplingParams(**{"temperature": 0.9, "seed": 7, **extra}).build(tiny_model)
    stage = {"dry_multiplier": "dry", "xtc_probability": "xtc", "top_n_sigma": "top_n_sigma",
             "dynatemp_range": "temp_ext", "mirostat_mode": "mirostat", "min_keep": "min_p"}[next(iter(extra))]
    assert stage in chain.stages


def test_llama_server_order(tiny_model):
    chain = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1,
                           dry_multiplier=0.5, top_n_sigma=1.0, typical_p=0.9, xtc_probability=0.3,
                           dynatemp_range=0.2, seed=1).build(tiny_model)
    assert chain.stages == ["penalties", "dry", "top_n_sigma", "top_k", "typical", "top_p", "min_p", "xtc",
                            "temp_ext", "dist"]


@pytest.mark.parametrize("bad", [{"xtc_probability": 1.5}, {"dry_base": 0.5}, {"dry_penalty_last_n": -1},
                                 {"dynatemp_exponent": 0.0}, {"mirostat_mode": 3}, {"min_keep": -1}])
def test_bad_values_are_refused_by_name(tiny_model, bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SamplingParams(**bad).build(tiny_model)


def test_a_custom_order_is_llama_cpp_s(tiny_model):
    """llama-server's `samplers`: the stages listed, in that order, each whatever its parameter."""
    order = sampler_order("kxt")
    assert order == ("top_k", "xtc", "temperature")
    chain = SamplingParams(temperature=0.8, top_k=40, top_p=0.5, repeat_penalty=1.3, samplers=order, seed=1)
    assert chain.build(tiny_model).stages == ["top_k", "xtc", "temp_ext", "dist"]
    listed = sampler_order(["penalties", "min_p", "typical_p", "temp"])
    assert SamplingParams(samplers=listed).build(tiny_model).stages == ["penalties", "min_p", "typical", "temp_ext",
                                                                        "dist"]
    with pytest.raises(ValueError, match="infill"):
        sampler_order(["top_k", "infill"])
