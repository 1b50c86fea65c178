"""LoRA adapters: loading, validation against the base model, applying/switching on one context."""

import numpy as np
import pytest
from helpers import N_THREADS, decode, make_ctx

import llamacore

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def adapters(tiny_model, lora_a_path, lora_b_path):
    return (llamacore.LoraAdapter(tiny_model, lora_a_path),
            llamacore.LoraAdapter(tiny_model, lora_b_path))


@pytest.fixture()
def ctx(tiny_model):
    return make_ctx(tiny_model, n_ctx=128, n_batch=64)


def run(ctx, model):
    """Fresh-cache logits of PROMPT's last token under the context's current adapters."""
    ctx.kv_clear()
    return decode(ctx, model.tokenize(PROMPT))


def test_adapter_metadata(adapters, lora_a_path, tiny_model):
    a, _ = adapters
    assert a.model is tiny_model
    assert a.path == str(lora_a_path)
    assert a.alpha == 8.0
    assert a.architecture == "llama"
    assert a.metadata["general.type"] == "adapter"
    assert a.metadata["adapter.type"] == "lora"
    assert a.base_model == "tiny-llama"
    assert "alpha=8.0" in repr(a)


def test_scale_zero_equals_base(ctx, tiny_model, adapters):
    a, b = adapters
    base = run(ctx, tiny_model)
    ctx.set_adapters({a: 0.0})
    assert ctx.adapters == {a: 0.0}
    np.testing.assert_array_equal(run(ctx, tiny_model), base)
    ctx.set_adapters({a: 0.0, b: 0.0})
    np.testing.assert_array_equal(run(ctx, tiny_model), base)
    ctx.set_adapters({})
    assert ctx.adapters == {}
    np.testing.assert_array_equal(run(ctx, tiny_model), base)


def test_adapter_changes_logits_and_scales(ctx, tiny_model, adapters):
    a, _ = adapters
    base = run(ctx, tiny_model)
    ctx.set_adapters({a: 1.0})
    full = run(ctx, tiny_model)
    ctx.set_adapters({a: 0.25})
    quarter = run(ctx, tiny_model)
    assert not np.allclose(full, base, atol=1e-2)
    # a smaller scale moves the logits less far from the base
    assert np.abs(quarter - base).mean() < np.abs(full - base).mean()
    assert not np.allclose(quarter, base, atol=1e-3)


def test_switching_is_exact_and_reversible(ctx, tiny_model, adapters):
    a, b = adapters
    ctx.set_adapters({a: 1.0})
    la = run(ctx, tiny_model)
    ctx.set_adapters({b: 1.0})
    lb = run(ctx, tiny_model)
    ctx.set_adapters({a: 1.0})
    la_again = run(ctx, tiny_model)
    assert not np.allclose(la, lb, atol=1e-2)
    np.testing.assert_array_equal(la_again, la)
    # and back to no adapter gives the base model again, on the same context
    ctx.set_adapters({})
    base = run(ctx, tiny_model)
    fresh = make_ctx(tiny_model, n_ctx=128, n_batch=64)
    np.testing.assert_array_equal(base, run(fresh, tiny_model))


def test_two_adapters_together(ctx, tiny_model, adapters):
    a, b = adapters
    ctx.set_adapters({a: 1.0})
    la = run(ctx, tiny_model)
    ctx.set_adapters({b: 1.0})
    lb = run(ctx, tiny_model)
    ctx.set_adapters({a: 1.0, b: 1.0})
    assert ctx.adapters == {a: 1.0, b: 1.0}
    lab = run(ctx, tiny_model)
    assert not np.allclose(lab, la, atol=1e-2)
    assert not np.allclose(lab, lb, atol=1e-2)
    assert np.isfinite(lab).all()


def test_same_adapter_on_two_contexts(tiny_model, adapters):
    a, _ = adapters
    c1 = llamacore.Context(tiny_model, n_ctx=128, n_threads=N_THREADS)
    c2 = llamacore.Context(tiny_model, n_ctx=128, n_threads=N_THREADS)
    c1.set_adapters({a: 1.0})
    # the adapter applies per context: c2 stays the base model
    assert not np.allclose(run(c1, tiny_model), run(c2, tiny_model), atol=1e-2)
    c2.set_adapters({a: 1.0})
    np.testing.assert_array_equal(run(c1, tiny_model), run(c2, tiny_model))


def test_other_architecture_rejected(tiny_model, lora_other_arch_path):
    with pytest.raises(ValueError, match="arch") as exc:
        llamacore.LoraAdapter(tiny_model, lora_other_arch_path)
    assert str(lora_other_arch_path) in str(exc.value)


def test_wrong_shape_rejected(tiny_model, lora_wrong_shape_path):
    with pytest.raises(ValueError, match="shape") as exc:
        llamacore.LoraAdapter(tiny_model, lora_wrong_shape_path)
    assert str(lora_wrong_shape_path) in str(exc.value)


def test_missing_and_non_adapter_files(tiny_model, tiny_model_path, tmp_path):
    with pytest.raises(FileNotFoundError):
        llamacore.LoraAdapter(tiny_model, tmp_path / "missing.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("not a gguf at all\n")
    with pytest.raises(ValueError, match="not a GGUF"):
        llamacore.LoraAdapter(tiny_model, text)
    # a full model file is a GGUF but not an adapter
    with pytest.raises(ValueError):
        llamacore.LoraAdapter(tiny_model, tiny_model_path)


def test_adapter_for_another_model_object_rejected(tiny_model, tiny_model_path, lora_a_path):
    other = llamacore.Model(tiny_model_path)  # same file, different Model object
    foreign = llamacore.LoraAdapter(other, lora_a_path)
    ctx = llamacore.Context(tiny_model, n_ctx=128, n_threads=N_THREADS)
    with pytest.raises(ValueError, match="another model"):
        ctx.set_adapters({foreign: 1.0})
    assert ctx.adapters == {}


def test_set_adapters_type_check(ctx):
    with pytest.raises(TypeError):
        ctx.set_adapters({"lora-a.gguf": 1.0})


def test_adapter_keeps_model_alive(tiny_model_path, lora_a_path):
    # dropping every other reference to the model must not free it under the adapter
    model = llamacore.Model(tiny_model_path)
    adapter = llamacore.LoraAdapter(model, lora_a_path)
    ctx = llamacore.Context(model, n_ctx=128, n_threads=N_THREADS)
    del model
    ctx.set_adapters({adapter: 1.0})
    out = run(ctx, ctx.model)
    assert np.isfinite(out).all()
