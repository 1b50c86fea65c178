"""llama-server's samplers on its /completion and on the OpenAI routes (DRY, XTC, top-n-sigma, dynamic
temperature, mirostat 1 and 2, min_keep): accepted where they were refused, each changes a seeded answer
and repeats it; /completion samples with llama-server's defaults, reported in generation_settings."""

from __future__ import annotations

import httpx
import pytest
from helpers import N_THREADS
from server import ServerProcess

pytestmark = [pytest.mark.server, pytest.mark.slow]

EXTRAS = [{"xtc_probability": 1.0, "xtc_threshold": 0.01},
          {"top_n_sigma": 0.5}, {"dynatemp_range": 0.7}, {"mirostat": 1}, {"mirostat": 2},
          {"min_keep": 40, "min_p": 0.99}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory, tiny_model_path):
    from tiny_models import write_model

    # a model whose next token depends on the last one only: greedy text runs round a cycle, which DRY breaks
    looping = write_model(tmp_path_factory.mktemp("looping") / "looping.gguf", memoryless=True)
    config = {"defaults": {"n_ctx": 256, "n_threads": N_THREADS, "sampling": {"dry_multiplier": 0.0}},
              "models": [{"alias": "m", "model": str(tiny_model_path)},
                         {"alias": "loop", "model": str(looping), "n_ctx": 1024}]}
    proc = ServerProcess(config, tmp_path_factory.mktemp("samplers")).start()
    yield proc
    proc.stop()


def complete(srv, **extra) -> dict:
    r = httpx.post(srv.base_url + "/completion", timeout=60,
                   json={"model": "m", "prompt": "Once upon a time there was", "n_predict": 24, "seed": 7, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_completion_samples_with_llama_server_defaults(srv):
    settings = complete(srv)["generation_settings"]
    assert (settings["temperature"], settings["top_k"], settings["top_p"], settings["min_p"]) == \
        pytest.approx((0.8, 40, 0.95, 0.05))
    assert settings["dry_multiplier"] == 0.0 and settings["xtc_probability"] == 0.0 and settings["mirostat"] == 0


@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: "-".join(f"{k}{v}" for k, v in e.items()))
def test_each_sampler_changes_the_answer_and_repeats_it(srv, extra):
    plain = complete(srv)["content"]
    first, again = complete(srv, **extra), complete(srv, **extra)
    assert first["content"] == again["content"] != plain
    assert all(first["generation_settings"][k] == v for k, v in extra.items())


def test_dry_breaks_a_loop(srv):
    greedy = {"model": "loop", "n_predict": 600, "temperature": 0, "return_tokens": True}
    looped = complete(srv, **greedy)["tokens"]
    assert len(set(looped[-300:])) < 250                     # it runs round a cycle
    dry = complete(srv, **greedy, dry_multiplier=2.0, dry_allowed_length=1, dry_penalty_last_n=1024)["tokens"]
    assert dry != looped and len(set(dry[-300:])) > len(set(looped[-300:]))


def test_the_openai_routes_take_them_too(srv):
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "seed": 3, "temperature": 0.9}
    plain = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
    dry = httpx.post(srv.base_url + "/v1/completions", json={**body, "xtc_probability": 1.0, "xtc_threshold": 0.01},
                     timeout=60).json()["choices"][0]["text"]
    assert dry != plain
    bad = httpx.post(srv.base_url + "/v1/completions", json={**body, "xtc_probability": 2}, timeout=60)
    assert bad.status_code == 400 and "xtc_probability" in bad.text
