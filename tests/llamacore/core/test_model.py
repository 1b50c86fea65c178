"""Model: loading, vocabulary, metadata and sizes of the tiny llama model (and the f16 variant)."""

import pytest
from tiny_models import CHATML_TEMPLATE, TinyModelSpec

import llamacore

HELLO_WORLD_IDS = [1, 15043, 2787]  # llama-spm: <s> ▁Hello ▁World


def test_tokenize_hello_world(tiny_model):
    assert tiny_model.tokenize("Hello World") == HELLO_WORLD_IDS
    assert tiny_model.tokenize("Hello World", add_special=True) == HELLO_WORLD_IDS
    assert tiny_model.tokenize("Hello World", add_special=False) == HELLO_WORLD_IDS[1:]
    assert tiny_model.tokenize(b"Hello World") == HELLO_WORLD_IDS


def test_detokenize_round_trip(tiny_model):
    ids = tiny_model.tokenize("Hello World", add_special=False)
    # llama.cpp's SPM detokenizer strips the space prefix of the first piece...
    assert tiny_model.detokenize(ids) == b"Hello World"
    # ...but not when BOS comes first: BOS renders as nothing and " Hello" keeps its space.
    assert tiny_model.detokenize(HELLO_WORLD_IDS) == b" Hello World"
    assert tiny_model.detokenize(HELLO_WORLD_IDS, remove_special=True) == b" Hello World"
    assert tiny_model.detokenize(HELLO_WORLD_IDS, unparse_special=True) == b"<s> Hello World"
    assert tiny_model.detokenize([]) == b""


def test_round_trip_longer_text(tiny_model):
    text = "The quick brown fox jumps over the lazy dog, 123 times!"
    ids = tiny_model.tokenize(text, add_special=False)
    assert len(ids) > 5
    assert tiny_model.detokenize(ids).decode() == text


def test_token_to_piece(tiny_model):
    assert tiny_model.token_to_piece(15043) == b" Hello"
    assert tiny_model.token_to_piece(2787) == b" World"
    assert tiny_model.token_to_piece(1) == b""              # control tokens hidden by default
    assert tiny_model.token_to_piece(1, special=True) == b"<s>"
    assert tiny_model.token_to_piece(2, special=True) == b"</s>"
    assert tiny_model.token_text(15043) == "\u2581Hello"


def test_special_tokens(tiny_model):
    assert tiny_model.token_bos == 1
    assert tiny_model.token_eos == 2
    assert tiny_model.add_bos is True
    assert tiny_model.is_eog(2)
    assert not tiny_model.is_eog(15043)
    assert tiny_model.is_control(1)
    assert not tiny_model.is_control(15043)


def test_metadata(tiny_model, tiny_spec):
    meta = tiny_model.metadata
    assert meta["general.architecture"] == "llama"
    assert meta["general.name"] == tiny_spec.name
    assert meta["llama.embedding_length"] == str(tiny_spec.n_embd)
    assert tiny_model.architecture == "llama"
    # metadata returns a copy: mutating it must not change the model's view
    meta["general.architecture"] = "changed"
    assert tiny_model.metadata["general.architecture"] == "llama"


def test_dimensions_match_spec(tiny_model, tiny_spec):
    assert tiny_model.n_vocab == 32000
    assert tiny_model.n_embd == tiny_spec.n_embd
    assert tiny_model.n_embd_out == tiny_spec.n_embd
    assert tiny_model.n_layer == tiny_spec.n_layer
    assert tiny_model.n_head == tiny_spec.n_head
    assert tiny_model.n_head_kv == tiny_spec.n_head_kv
    assert tiny_model.n_ctx_train == tiny_spec.n_ctx_train
    assert tiny_model.has_decoder and not tiny_model.has_encoder
    assert not tiny_model.is_recurrent


def test_chat_template(tiny_model):
    assert tiny_model.chat_template() == CHATML_TEMPLATE
    assert tiny_model.chat_template("no-such-template") is None


def test_size_and_params(tiny_model, tiny_spec):
    assert tiny_model.size > 0
    assert tiny_model.n_params > 0
    # token_embd + output (32000 x n_embd each) dominate; f32 = 4 bytes per parameter
    assert tiny_model.n_params >= 2 * 32000 * tiny_spec.n_embd
    assert tiny_model.size == 4 * tiny_model.n_params


def test_f16_model(tiny_model_f16_path, tiny_model):
    m16 = llamacore.Model(tiny_model_f16_path)
    assert m16.n_params == tiny_model.n_params
    assert m16.size < tiny_model.size  # 2-D weights stored as f16
    assert m16.tokenize("Hello World") == HELLO_WORLD_IDS
    assert "F16" in m16.desc


def test_vocab_only(tiny_model_path):
    m = llamacore.Model(tiny_model_path, vocab_only=True)
    assert m.n_vocab == 32000
    assert m.tokenize("Hello World") == HELLO_WORLD_IDS


def test_kv_override(tiny_model_path):
    m = llamacore.Model(tiny_model_path, kv_overrides={"llama.context_length": 4096})
    assert m.n_ctx_train == 4096


def test_spec_validation():
    with pytest.raises(ValueError):
        TinyModelSpec(dtype="q4_0")


@pytest.mark.parametrize("ftype", ["q8_0", "q4_0"])
def test_a_quantized_model_decodes_with_the_default_buffers(tmp_path, tiny_model_f16_path, ftype):
    """Quantized weights through the default weight buffers, a batch then one token. On AMX CPUs
    ggml's AMX buffer type crashes some machines at the first batched product (llama.cpp issue
    20824): llamacore keeps quantized weights out of it there (vendor/patches/0003), so they take the
    repacked buffers. Run in a child process, so that a crash fails this test instead of ending
    the test run."""
    import subprocess
    import sys

    from llamacore.quantize import quantize

    path = quantize(tiny_model_f16_path, tmp_path / f"model-{ftype}.gguf", ftype)
    script = ("import sys; from llamacore import Batch, Context, Model\n"
              "m = Model(sys.argv[1]); c = Context(m, n_ctx=128, n_threads=2); b = Batch(64)\n"
              "b.add_sequence(list(range(1, 40)), 0, 0); c.decode(b); t = int(c.logits(-1).argmax())\n"
              "b.clear(); b.add(t, 39, 0, True); c.decode(b); print(int(c.logits(-1).argmax()))\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip().isdigit()


def _extra_bufts_in_child(path, amx_quantized: str | None) -> tuple[bool, bool, str | None]:
    """(default_extra_bufts(path), the CPU has AMX, GGML_CPU_AMX_QUANTIZED) in a fresh process whose
    environment sets GGML_CPU_AMX_QUANTIZED to `amx_quantized` (None: unset)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_AMX_QUANTIZED"}
    if amx_quantized is not None:
        env["GGML_CPU_AMX_QUANTIZED"] = amx_quantized
    script = ("import json, os, sys; from llamacore._core import _cpu_has_amx, default_extra_bufts\n"
              "print(json.dumps([default_extra_bufts(sys.argv[1]), _cpu_has_amx(),"
              " os.environ.get('GGML_CPU_AMX_QUANTIZED')]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    return tuple(json.loads(done.stdout))


def test_extra_buffer_types_by_default(tmp_path, tiny_model_path):
    """Weights take llama.cpp's extra (repacked) buffers by default, as llama.cpp does. On AMX CPUs
    importing llamacore keeps quantized weights out of ggml's AMX buffer type unless the environment
    says otherwise (GGML_CPU_AMX_QUANTIZED); if it lets them in, a quantized model's extra buffers
    are off, since those kernels crash some machines."""
    from tiny_models import TinyModelSpec, write_model

    from llamacore._core import default_extra_bufts

    assert default_extra_bufts(tiny_model_path) is True
    quantized = write_model(tmp_path / "model-q8_0.gguf", TinyModelSpec(dtype="q8_0"))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF\x03\x00")
    on, amx, env = _extra_bufts_in_child(quantized, None)
    assert on is True and env == ("0" if amx else None)
    assert _extra_bufts_in_child(junk, None)[0] is True
    on, amx, env = _extra_bufts_in_child(quantized, "1")      # AMX's quantized kernels allowed
    assert on is (not amx) and env == "1"
    assert _extra_bufts_in_child(junk, "1")[0] is (not amx)
    assert _extra_bufts_in_child(tiny_model_path, "1")[0] is True
