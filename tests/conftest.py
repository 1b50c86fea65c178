"""Shared fixtures: tiny generated GGUF models/adapters, the real test models, a running server.

Helpers that tests import live in plain modules: helpers.py, isolation.py, gguf_files.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import N_THREADS, SHARED_MODELS

# -- generated tiny models ------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory):
    """Session directory holding every generated tiny model and adapter."""
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_spec():
    """The TinyModelSpec of `tiny_model_path` (defaults: 64-dim, 2 layers, 4 heads, 2 KV heads)."""
    from tiny_models import TinyModelSpec

    return TinyModelSpec()


@pytest.fixture(scope="session")
def tiny_model_path(tiny_models_dir, tiny_spec):
    from tiny_models import write_model

    return write_model(tiny_models_dir / "model-f32.gguf", tiny_spec)


@pytest.fixture(scope="session")
def tiny_model_f16_path(tiny_models_dir):
    from tiny_models import TinyModelSpec, write_model

    return write_model(tiny_models_dir / "model-f16.gguf", TinyModelSpec(dtype="f16"))


@pytest.fixture(scope="session")
def lora_a_path(tiny_models_dir, tiny_spec):
    from tiny_models import write_lora

    return write_lora(tiny_models_dir / "lora-a.gguf", tiny_spec, seed=1)


@pytest.fixture(scope="session")
def lora_b_path(tiny_models_dir, tiny_spec):
    from tiny_models import write_lora

    return write_lora(tiny_models_dir / "lora-b.gguf", tiny_spec, seed=2)


@pytest.fixture(scope="session")
def lora_other_arch_path(tiny_models_dir, tiny_spec):
    """An adapter with the right tensor shapes but general.architecture = gpt2."""
    from tiny_models import write_lora

    return write_lora(tiny_models_dir / "lora-gpt2.gguf", tiny_spec, seed=3, arch="gpt2")


@pytest.fixture(scope="session")
def lora_wrong_shape_path(tiny_models_dir):
    """A llama adapter made for a 128-dim base model (shapes do not match the 64-dim tiny model)."""
    from tiny_models import TinyModelSpec, write_lora

    spec = TinyModelSpec(n_embd=128, n_ff=256)
    return write_lora(tiny_models_dir / "lora-wrong-shape.gguf", spec, seed=4)


@pytest.fixture(scope="session")
def projector_path(tiny_models_dir, tiny_spec):
    """A tiny random "mlp" vision projector for the tiny model (16 image tokens per image)."""
    from tiny_vision import write_projector

    return write_projector(tiny_models_dir / "mmproj-tiny.gguf", tiny_spec.n_embd)


@pytest.fixture(scope="session")
def tiny_model(tiny_model_path):
    """The f32 tiny model, loaded once per session (read-only: do not mutate it)."""
    import llamacore

    return llamacore.Model(tiny_model_path)


# -- config files -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model_path, lora_a_path, lora_b_path, lora_other_arch_path) -> Path:
    """A folder with models/{model,lora-a,lora-b,lora-gpt2,not-gguf}.gguf; configs go next to it."""
    from gguf_files import place

    root = tmp_path_factory.mktemp("config")
    models = root / "models"
    models.mkdir()
    for src, name in ((tiny_model_path, "model.gguf"), (lora_a_path, "lora-a.gguf"),
                      (lora_b_path, "lora-b.gguf"), (lora_other_arch_path, "lora-gpt2.gguf")):
        place(src, models / name)
    (models / "not-gguf.gguf").write_bytes(b"PK\x03\x04 this is a zip file, not a model")
    return root


# -- real models ----------------------------------------------------------------------------


def _shared_model(name: str) -> Path:
    path = SHARED_MODELS / name
    if not path.is_file():
        pytest.skip(f"real test model {name} not found at {path} (the ../shared/models folder is "
                    "only present in the project's own checkout)")
    return path


@pytest.fixture(scope="session")
def stories_path():
    """stories260K.gguf: trained llama model (TinyStories), llama-spm tokenizer with 512 tokens."""
    return _shared_model("stories260K.gguf")


@pytest.fixture(scope="session")
def minilm_path():
    """all-MiniLM-L6-v2-f16.gguf: BERT sentence embedding model, 384 dims, mean pooling."""
    return _shared_model("all-MiniLM-L6-v2-f16.gguf")


# -- a running server ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def embed_model_path(tiny_models_dir):
    """A tiny llama model used as an embedder (mean pooling over its hidden states)."""
    from tiny_models import TinyModelSpec, write_model

    return write_model(tiny_models_dir / "embed-f32.gguf", TinyModelSpec(seed=5, name="tiny-embed"))


@pytest.fixture(scope="session")
def scripted(tmp_path_factory):
    """One llamaserve process with a scripted model per chat-template family (support/agent_script.py):
    the server and each alias's answers, for the tool-call tests of every route."""
    from agent_script import scripted_server

    proc, answers = scripted_server(tmp_path_factory.mktemp("scripted"))
    yield proc, answers
    proc.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory, tiny_model_path, lora_a_path, lora_b_path, embed_model_path):
    """One llamaserve process: a base model, three LoRA aliases sharing it, and an embedder."""
    from server import ServerProcess

    config = {
        "idle_unload": 600,
        "parallel": 8,
        "max_queue": 64,
        "defaults": {"n_ctx": 256, "n_threads": N_THREADS},
        "models": [
            {"alias": "base", "model": str(tiny_model_path), "aliases": ["gpt-test"]},
            {"alias": "la", "model": str(tiny_model_path), "lora_adapters": {str(lora_a_path): 1.0}},
            {"alias": "lb", "model": str(tiny_model_path), "lora_adapters": {str(lora_b_path): 1.0}},
            {"alias": "lab", "model": str(tiny_model_path),
             "lora_adapters": {str(lora_a_path): 1.0, str(lora_b_path): 0.5}},
            {"alias": "emb", "model": str(embed_model_path), "embedding": True, "pooling_type": "mean"},
        ],
    }
    proc = ServerProcess(config, tmp_path_factory.mktemp("server")).start()
    yield proc
    proc.stop()
