"""llamacore.quantize: llama.cpp's quantizer on a real model, and its arguments checked before C."""

from __future__ import annotations

import pytest

from llamacore import Llama
from llamacore._core import Model
from llamacore.quantize import quantize

N_THREADS = 2


@pytest.mark.parametrize(("ftype", "file_type"), [("q8_0", 7), ("Q4_0", 2), (1, 1)])
def test_quantized_model_loads_and_generates(tmp_path, tiny_model_path, ftype, file_type):
    out = quantize(tiny_model_path, tmp_path / "out.gguf", ftype, threads=N_THREADS)
    model = Model(str(out))
    assert model.metadata["general.file_type"] == str(file_type)
    assert out.stat().st_size < tiny_model_path.stat().st_size or file_type == 1
    llm = Llama(str(out), n_ctx=64, n_threads=N_THREADS, verbose=False)
    assert llm.create_completion("Once upon", max_tokens=4, temperature=0)["usage"]["completion_tokens"] > 0


def test_bad_arguments_raise_before_llama_cpp(tmp_path, tiny_model_path):
    with pytest.raises(ValueError, match="unknown quantization type 'q9_9'"):
        quantize(tiny_model_path, tmp_path / "o.gguf", "q9_9")
    with pytest.raises(ValueError, match="importance matrix"):
        quantize(tiny_model_path, tmp_path / "o.gguf", "iq2_xs")
    with pytest.raises(ValueError, match="is the input"):
        quantize(tiny_model_path, tiny_model_path, "q8_0")
    with pytest.raises(FileNotFoundError):
        quantize(tmp_path / "missing.gguf", tmp_path / "o.gguf", "q8_0")
    with pytest.raises(FileNotFoundError, match="folder"):
        quantize(tiny_model_path, tmp_path / "no/such/dir/o.gguf", "q8_0")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    with pytest.raises(ValueError, match="not a GGUF file"):
        quantize(junk, tmp_path / "o.gguf", "q8_0")
    with pytest.raises(ValueError, match="threads"):
        quantize(tiny_model_path, tmp_path / "o.gguf", "q8_0", threads=-1)
    assert not (tmp_path / "o.gguf").exists()
