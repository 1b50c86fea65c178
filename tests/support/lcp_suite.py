"""A pytest plugin that runs llama-cpp-python's own high-level tests (its 0.3.36 sdist's tests/, unchanged)
against llamacore.

- `import llama_cpp` and `import llama_cpp.<sub>` resolve to `llamacore` and `llamacore.<sub>` (the very
  same module objects, through a sys.meta_path finder), so `llama_cpp.Llama` is `llamacore.Llama`.
  A name llamacore lacks is not faked: it stays missing and the test that uses it fails, except the
  names of llama-cpp-python's low-level ctypes API, which llamacore deliberately does not have.
- `llama_cpp.llama_cpp` (the ctypes bindings) and `llama_cpp._internals` (their object wrappers) are that
  low-level API. test_llama.py imports `_internals` at module level, so it resolves to an empty
  placeholder whose every attribute access raises, naming the missing API; the tests that use it are
  skipped through LOW_LEVEL below, one by one with the reason.
- Models: the tests fetch theirs with `huggingface_hub.hf_hub_download`, which this plugin replaces
  before collection: a model with a local stand-in of the same kind (MODELS) gives that file, any
  other skips the test, naming the model and why no stand-in fits (UNAVAILABLE). Nothing is
  downloaded (HF_HUB_OFFLINE is set too).

Use: run pytest in the extracted sdist's root (test_llama.py opens ./vendor/llama.cpp/models/...) with
this folder and the repository root on PYTHONPATH and `-p lcp_suite` (tests/llamacore/llama/test_lcp_suite.py does).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_MODELS = REPO_ROOT.parent / "shared/models"
STORIES = SHARED_MODELS / "stories260K.gguf"
MINILM = SHARED_MODELS / "all-MiniLM-L6-v2-f16.gguf"

os.environ["HF_HUB_OFFLINE"] = "1"

# -- llama_cpp -> llamacore ------------------------------------------------------------------------

# llama-cpp-python's low-level API: submodule -> what it is
LOW_LEVEL_MODULES = {
    "llama_cpp": "llama-cpp-python's ctypes bindings of llama.h (llama_cpp.llama_cpp)",
    "_internals": "llama-cpp-python's wrappers of the ctypes API (llama_cpp._internals: LlamaModel, "
                  "LlamaContext, LlamaBatch, LlamaSampler)",
    "_ctypes_extensions": "llama-cpp-python's ctypes loading helpers (llama_cpp._ctypes_extensions)",
}


def _low_level_placeholder(name: str, what: str) -> types.ModuleType:
    """An empty module: importing it works (test_llama.py imports _internals at module level), using it
    raises, naming the API llamacore does not have."""
    module = types.ModuleType(name, f"placeholder: {what} has no llamacore counterpart")

    def __getattr__(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(f"{name}.{attr}: {what} has no llamacore counterpart")

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return module


class _LlamaCppAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `llama_cpp[.sub]` as the already-imported `llamacore[.sub]` (one module object, not a copy)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "llama_cpp" and not fullname.startswith("llama_cpp."):
            return None
        sub = fullname[len("llama_cpp."):] if fullname != "llama_cpp" else ""
        if sub in LOW_LEVEL_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        real = "llamacore" + ("." + sub if sub else "")
        if importlib.util.find_spec(real) is None:
            return None                      # ModuleNotFoundError, as for any missing module
        return importlib.util.spec_from_loader(fullname, self, is_package=not sub)

    def create_module(self, spec):
        sub = spec.name[len("llama_cpp."):] if spec.name != "llama_cpp" else ""
        if sub in LOW_LEVEL_MODULES:
            return _low_level_placeholder(spec.name, LOW_LEVEL_MODULES[sub])
        return importlib.import_module("llamacore" + ("." + sub if sub else ""))

    def exec_module(self, module):
        pass


def _install_alias() -> None:
    if not any(isinstance(f, _LlamaCppAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _LlamaCppAlias())
    for name in [n for n in sys.modules if n == "llama_cpp" or n.startswith("llama_cpp.")]:
        del sys.modules[name]            # a real llama-cpp-python imported earlier must not be used


# -- models ----------------------------------------------------------------------------------------

# (hf repo, file) -> the local file standing in for it (same kind of model; the tests using them
# assert only generic properties: cache reuse equals fresh decoding, embedding shapes/batching)
MODELS: dict[tuple[str, str], Path] = {
    # llama-architecture tinyllamas story model -> its smaller sibling from the same repo
    ("ggml-org/models", "tinyllamas/stories15M-q4_0.gguf"): STORIES,
    # BERT sentence embedder (bge-small, 384 dims) -> MiniLM-L6 (BERT, 384 dims)
    ("CompendiumLabs/bge-small-en-v1.5-gguf", "bge-small-en-v1.5-q4_k_m.gguf"): MINILM,
}

# (hf repo, file) -> why there is no local stand-in (the test skips with this reason)
UNAVAILABLE: dict[tuple[str, str], str] = {
    ("lmstudio-community/Qwen3.5-0.8B-GGUF", "Qwen3.5-0.8B-Q8_0.gguf"):
        "its tests assert this model's exact output (token ids, greedy text)",
    ("QuantFactory/mamba-130m-hf-GGUF", "mamba-130m-hf.Q2_K.gguf"):
        "no recurrent (Mamba) model is available offline and tests/support/tiny_models.py writes only llama",
    ("tiiuae/Falcon-H1-Tiny-90M-Instruct-GGUF", "Falcon-H1-Tiny-90M-Instruct-Q2_K.gguf"):
        "no hybrid (attention + SSM) model is available offline and tests/support/tiny_models.py writes only llama",
}


def offline_hf_hub_download(repo_id: str, filename: str, *args, **kwargs) -> str:
    key = (repo_id, filename)
    if key in MODELS:
        path = MODELS[key]
        if not path.exists():
            pytest.skip(f"hub model {repo_id}/{filename}: its stand-in {path} is absent")
        return str(path)
    reason = UNAVAILABLE.get(key, "no local stand-in is listed in tests/support/lcp_suite.py")
    pytest.skip(f"hub model {repo_id}/{filename} is not downloaded offline: {reason}")


# -- tests that need the low-level API ---------------------------------------------------------------

# test id (file::name) -> the low-level API it calls; each one is skipped with that reason
LOW_LEVEL: dict[str, str] = {
    # builds its model, context, batch and sampler from llama_cpp._internals (LlamaModel, LlamaContext,
    # LlamaBatch, LlamaSampler) and llama_cpp.llama_model_default_params / llama_context_default_params
    # / llama_supports_mmap / LLAMA_LOAD_MODE_* of the ctypes bindings (it also needs the Qwen3.5 model)
    "tests/test_llama.py::test_real_model":
        "calls the low-level ctypes API (llama_cpp._internals.LlamaModel/LlamaContext/LlamaBatch/"
        "LlamaSampler, llama_cpp.llama_model_default_params, llama_context_default_params)",
    # asserts `llama._ctx.ctx is not None`: llama-cpp-python's _internals.LlamaContext and its raw ctypes
    # pointer; llamacore's Llama._ctx is a llamacore.Context (the rest of the test passes unchanged)
    "tests/test_llama.py::test_llama_cpp_tokenization":
        "asserts on the raw ctypes context pointer (llama._ctx.ctx of llama_cpp._internals.LlamaContext)",
}


def pytest_configure(config):
    _install_alias()
    import huggingface_hub

    # the test files do `from huggingface_hub import hf_hub_download` at import: patch before collection
    huggingface_hub.hf_hub_download = offline_hf_hub_download


def pytest_collection_modifyitems(config, items):
    for item in items:
        test_id = item.nodeid.split("[")[0]
        for key, reason in LOW_LEVEL.items():
            if test_id == key or test_id.endswith("/" + key):
                item.add_marker(pytest.mark.skip(reason=f"low-level API: {reason}"))
