"""flash_attn="prompts" (vendor/patches/0005): flash attention for batches of 16 tokens or more,
plain attention for smaller ones (token generation). The choice is per batch, so each kind of
batch must give exactly what the context-wide setting of its kind gives."""

import numpy as np
import pytest
from helpers import N_THREADS

from llamacore import Batch, Context, Model

LONG = [1] + [100 + (i * 7) % 300 for i in range(40)]     # one batch of 41 tokens: flash attention
SHORT = LONG[:9]                                          # one batch of 9 tokens: plain attention


@pytest.fixture(scope="module")
def model(tiny_model_path):
    return Model(str(tiny_model_path))


def logits_after(model: Model, flash_attn, prompt: list[int], steps: int = 4, **kw) -> list[np.ndarray]:
    """The prompt's last logits, then those of `steps` greedy tokens decoded one at a time."""
    ctx = Context(model, n_ctx=256, n_threads=N_THREADS, flash_attn=flash_attn, **kw)
    batch = Batch(64)
    batch.add_sequence(prompt, 0, 0, logits_last=True)
    ctx.decode(batch)
    out = [ctx.logits(-1).copy()]
    for pos in range(len(prompt), len(prompt) + steps):
        batch.clear()
        batch.add(int(np.argmax(out[-1])), pos, 0, logits=True)
        ctx.decode(batch)
        out.append(ctx.logits(-1).copy())
    return out


def test_small_batches_use_plain_attention(model):
    """Every batch under 16 tokens: bitwise what flash_attn off gives (same transposed V cache)."""
    got = logits_after(model, "prompts", SHORT)
    want = logits_after(model, "off", SHORT)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert not np.array_equal(got[-1], logits_after(model, "on", SHORT)[-1])   # the two kinds differ


def test_a_prompt_batch_uses_flash_attention_and_generation_goes_on_with_plain(model):
    """A 41-token batch: bitwise what flash_attn on gives (its V made contiguous first). The tokens
    after it read the cache with plain attention: close to both settings, not equal to either."""
    got = logits_after(model, "prompts", LONG)
    on, off = logits_after(model, "on", LONG), logits_after(model, "off", LONG)
    assert np.array_equal(got[0], on[0])
    scale = float(np.abs(on[0]).max())
    for g, a, b in zip(got[1:], on[1:], off[1:]):
        assert np.abs(g - a).max() < 1e-2 * scale and np.abs(g - b).max() < 1e-2 * scale


def test_a_quantized_v_cache_keeps_flash_attention_for_every_batch(tmp_path):
    """A quantized V cache cannot be stored transposed: "prompts" is then flash attention throughout."""
    from tiny_models import TinyModelSpec, write_model

    # heads of 32 values: a whole q8_0 block
    model = Model(str(write_model(tmp_path / "heads32.gguf", TinyModelSpec(n_embd=64, n_head=2, n_head_kv=2,
                                                                             name="heads32"))))
    got = logits_after(model, "prompts", SHORT, type_v="q8_0")
    want = logits_after(model, "on", SHORT, type_v="q8_0")
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
