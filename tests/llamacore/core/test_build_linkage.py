"""The extension calls llama.cpp's own functions directly, as llama.cpp's executables (llama-bench,
llama-server) do: setup.py links it with -Bsymbolic-functions. Without that, every call between
llama.cpp's functions inside the shared object goes through the PLT, which cost 1-4% of a decode
step on small models."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from llamacore import _core

LLAMA_CPP_PREFIXES = ("ggml_", "gguf_", "llama_", "mtmd_")


def _plt_symbols(path: str) -> list[str]:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    relocs = subprocess.run([readelf, "--relocs", "--wide", path], capture_output=True, text=True, check=True).stdout
    return [line.split()[4].split("@")[0] for line in relocs.splitlines() if "JUMP_SLOT" in line]


def test_calls_into_llama_cpp_bind_inside_the_extension():
    symbols = _plt_symbols(_core.__file__)
    assert any(s.startswith("Py") for s in symbols), "no Python functions in the PLT: this reading of it is wrong"
    through_plt = [s for s in symbols if s.startswith(LLAMA_CPP_PREFIXES)]
    assert not through_plt, f"{len(through_plt)} llama.cpp functions are called through the PLT: {through_plt[:5]}"


def test_llama_cpp_api_stays_exported():
    """llama-cpp-python's ctypes binding (vendor/lcp_python.py) finds the llama_* API by name."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", _core.__file__], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert {"llama_decode", "llama_model_load_from_file", "llama_tokenize", "ggml_backend_load"} <= exported
