"""An n_draft the config leaves out: 8, or 6 where ggml's tiled kernels would take a model's verify
batches of 8 rows (llamaserve.engine.speculative.default_n_draft, llamacore.generation.exact_rows), so
that speculative decoding's greedy answers stay those of plain decoding also where two logits nearly
tie: those kernels round otherwise than one-row products (about 90% of the outputs of a random Q6_K product of 8-16 rows
differ in the last bits), and under 8 rows ggml computes each row as it computes one alone."""

from __future__ import annotations

import pytest
from helpers import assert_batch_rows_equal_one_row_decodes
from tiny_models import TinyModelSpec, write_model

import llamacore
from llamacore.generation.exact_rows import TILED_EXACT_ROWS, X86
from llamacore.quantize import quantize
from llamaserve.config.parse import load_config
from llamaserve.engine.speculative import DEFAULT_N_DRAFT, default_n_draft, drafter_spec

SPEC = TinyModelSpec(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, dtype="f16", seed=23)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("draft_length")
    f16 = write_model(folder / "f16.gguf", SPEC)
    return {"f16": f16, "q8_0": quantize(f16, folder / "q8_0.gguf", "q8_0"),
            "q4_k_m": quantize(f16, folder / "q4_k_m.gguf", "q4_k_m"),
            "q6_k": quantize(f16, folder / "q6_k.gguf", "q6_k", pure=True)}


@pytest.mark.skipif(not X86, reason="ggml's tiled kernels are x86's")
def test_models_with_tiled_weights_draft_six(models, monkeypatch):
    monkeypatch.delenv("GGML_CPU_TILED_MM", raising=False)
    assert default_n_draft(models["q4_k_m"]) == default_n_draft(models["q6_k"]) == TILED_EXACT_ROWS - 1 == 6
    # every matrix of these two files is f16 or q8_0
    assert default_n_draft(models["f16"]) == default_n_draft(models["q8_0"]) == DEFAULT_N_DRAFT == 8
    monkeypatch.setenv("GGML_CPU_TILED_MM", "0")      # ggml keeps those weights on the one-row kernels
    assert default_n_draft(models["q6_k"]) == DEFAULT_N_DRAFT


def test_config_without_n_draft_takes_the_models_default(models, tmp_path, monkeypatch):
    monkeypatch.delenv("GGML_CPU_TILED_MM", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n- {{alias: k, model: {models['q6_k']}, speculative: {{draft_model: ngram}}}}\n"
                      f"- {{alias: given, model: {models['q6_k']}, speculative: {{draft_model: ngram, n_draft: 8}}}}\n")
    left_out, given = load_config(config).models
    assert left_out.speculative["n_draft"] is None
    assert drafter_spec(dict(left_out.speculative), models["q6_k"]).n_draft == (6 if X86 else 8)
    assert drafter_spec(dict(given.speculative), models["q6_k"]).n_draft == 8     # as given


def test_q6_k_verify_batches_of_seven_rows_equal_one_row_decodes(models):
    """What the default rests on: below 8 rows a Q6_K product's rows are one-row products."""
    assert_batch_rows_equal_one_row_decodes(llamacore.Model(models["q6_k"]), (2, TILED_EXACT_ROWS))
