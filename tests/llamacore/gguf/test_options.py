"""llamacore.gguf.load_options: one list of llama.cpp's option names, importable without llama.cpp.

Checks that the compiled tables and llamaserve's config agree with it, that the pure-Python
modules import without loading the extension, and that load keys a kind of model has no use
for are config errors (or reach the engine) instead of being dropped.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest
from gguf_files import fake_gguf
from isolation import run_python

from llamacore.gguf import load_options as options

PURE_MODULES = ("llamacore.gguf.load_options", "llamacore.gguf.header", "llamacore.gguf.check",
                "llamacore.chat.templates", "llamacore.grammar.json_schema", "llamacore.grammar.gbnf",
                "llamaserve.config.parse")


def test_pure_modules_import_without_the_extension():
    code = textwrap.dedent(f"""
        import importlib, sys
        for name in {PURE_MODULES!r}:
            importlib.import_module(name)
        assert "llamacore._core" not in sys.modules, sorted(m for m in sys.modules if "llamacore" in m)
        import llamacore
        assert set(llamacore.__all__) <= set(dir(llamacore))
        assert "llamacore._core" not in sys.modules, "dir() or __all__ loaded the extension"
        from llamacore import *
        assert {{"Model", "Llama", "DecodeError"}} <= set(globals())
        assert "llamacore._core" in sys.modules and Model.__module__ == "llamacore._core"
        print("ok")
    """)
    out = run_python(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_package_attributes():
    import llamacore

    assert sorted(llamacore.__all__) == sorted(set(llamacore.__all__))
    for name in llamacore.__all__:
        assert getattr(llamacore, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        llamacore.NoSuchThing  # noqa: B018
    assert set(llamacore.__all__) == set(llamacore._EXPORTS)


def test_compiled_tables_match_the_option_names():
    from llamacore import _core

    assert tuple(_core._KV_CACHE_TYPES) == options.KV_CACHE_TYPES
    assert tuple(_core.POOLING_TYPES) == options.POOLING_TYPES
    assert list(_core.POOLING_TYPES.values()) == list(range(-1, len(options.POOLING_TYPES) - 1))  # enum order
    assert tuple(_core._ATTENTION_TYPES) == options.ATTENTION_TYPES
    assert list(_core._ATTENTION_TYPES.values()) == list(range(-1, len(options.ATTENTION_TYPES) - 1))
    assert {k for k in _core._FLASH_ATTN if isinstance(k, str)} == set(options.FLASH_ATTN)
    assert tuple(_core._SPLIT_MODES) == options.SPLIT_MODES
    # each KV cache type is the ggml type of that name
    assert {name: _core._ggml_type_name(code) for name, code in _core._KV_CACHE_TYPES.items()} == {
        name: name for name in options.KV_CACHE_TYPES}


def embedded_parameters(cls) -> set[str]:
    """Parameter names of a compiled class's constructor, from the signature Cython embeds in its doc."""
    head = cls.__doc__.split("\n", 1)[0]
    assert head.startswith(f"{cls.__name__}(") and head.endswith(")"), head
    names = (part.split("=")[0].split()[-1] for part in head[len(cls.__name__) + 1:-1].split(", "))
    return {name for name in names if name != "*"}


def test_load_key_split_matches_the_constructors():
    from llamacore import Context, Llama, Model

    model_params = embedded_parameters(Model)
    context_params = embedded_parameters(Context)
    assert {"path", "n_gpu_layers", "check_tensors"} <= model_params and "model" in context_params
    llama_params = set(inspect.signature(Llama.__init__).parameters)
    assert options.MODEL_KEYS <= model_params
    assert options.CONTEXT_KEYS <= context_params and "n_ctx" in context_params
    assert options.LOAD_KEYS - {"seed"} <= llama_params     # Llama takes every load key (seed too)
    assert "seed" in llama_params
    assert not options.MODEL_KEYS & options.CONTEXT_KEYS
    assert not options.EMBEDDING_ONLY_KEYS & options.GENERATION_ONLY_KEYS


def test_config_checks_every_load_key():
    from llamaserve.config.keys import KV_CACHE_TYPES, LOAD_KEYS, POOLING_TYPES

    assert LOAD_KEYS.keys() == options.LOAD_KEYS
    assert (KV_CACHE_TYPES, POOLING_TYPES) == (options.KV_CACHE_TYPES, options.POOLING_TYPES)


# -- keys that only one kind of model uses ---------------------------------------------------


@pytest.fixture
def model_file(tmp_path) -> Path:
    return fake_gguf(tmp_path / "m.gguf")


def parse(model_file: Path, *entries: dict, defaults: dict | None = None):
    from llamaserve.config.parse import parse_config

    data = {"models": [{"model": str(model_file), "alias": f"m{i}", **e} for i, e in enumerate(entries)]}
    if defaults:
        data["defaults"] = defaults
    return parse_config(data, Path("c.yaml"), model_file.parent)


def problems(model_file: Path, *entries: dict, defaults: dict | None = None) -> list[str]:
    from llamaserve.config.parse import ConfigError

    with pytest.raises(ConfigError) as info:
        parse(model_file, *entries, defaults=defaults)
    return info.value.problems


def test_pooling_type_on_a_generation_entry_is_a_config_error(model_file):
    assert problems(model_file, {"pooling_type": "mean"}) == [
        ("c.yaml: models[0].pooling_type: applies only to embedding models (embedding: true); "
         "remove it from this entry or from defaults")]
    assert problems(model_file, {"embedding": False, "pooling_type": 1})[0].startswith(
        "c.yaml: models[0].pooling_type: applies only to embedding models")


def test_seed_on_an_embedding_entry_is_a_config_error(model_file):
    assert problems(model_file, {"embedding": True, "seed": 3}) == [
        ("c.yaml: models[0].seed: applies only to generation models (embedding models do not sample); "
         "remove it from this entry or from defaults")]


def test_kind_keys_from_defaults_are_checked_per_entry(model_file):
    found = problems(model_file, {}, {"embedding": True}, defaults={"seed": 5})
    assert [p.split(": ")[1] for p in found] == ["models[1].seed"]
    found = problems(model_file, {}, {"embedding": True}, defaults={"pooling_type": "cls"})
    assert [p.split(": ")[1] for p in found] == ["models[0].pooling_type"]


def test_kind_keys_are_kept_where_they_apply(model_file):
    config = parse(model_file, {"seed": 7}, {"embedding": True, "pooling_type": "mean"})
    assert config.models[0].load["seed"] == 7
    assert config.models[1].load["pooling_type"] == "mean"


def test_registry_passes_the_seed_to_the_engine(model_file, monkeypatch):
    from llamaserve.models import factory as engines
    from llamaserve.models import registry
    from llamaserve.runtime.metrics import Metrics

    made: list[tuple[tuple, dict]] = []
    class FakeEngine:
        def __init__(self, *args, **kwargs):
            made.append((args, kwargs))

        def start(self):
            return self

    monkeypatch.setattr(engines, "Engine", FakeEngine)
    config = parse(model_file, {"seed": 42, "n_batch": 64, "use_mmap": False, "isolation": "thread"},
                   {"alias": "other", "isolation": "thread"})
    reg = registry.Registry(config, Metrics())
    for entry in config.models:
        reg._load_blocking(entry.base_key(), [entry])
    (_, first), (_, second) = made
    assert first["seed"] == 42 and second["seed"] is None
    assert first["model_kwargs"] == {"use_mmap": False} and first["context_kwargs"] == {"n_batch": 64}


@pytest.mark.parametrize("name", ["Model", "LoraAdapter", "Batch", "Context", "Sampler"])
def test_stub_constructors_match_the_compiled_ones(name):
    """stubtest cannot see a compiled class's constructor parameters; the embedded signature can."""
    import ast

    from llamacore import _core

    stub = ast.parse((Path(_core.__file__).parent / "_core.pyi").read_text())
    cls = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == name)
    init = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name in ("__init__", "__new__")]
    stub_params = {a.arg for f in init for a in f.args.args[1:] + f.args.kwonlyargs}
    runtime = getattr(_core, name)
    if runtime.__doc__.startswith(f"{name}("):
        assert stub_params == embedded_parameters(runtime)
    else:       # arguments taken by __cinit__, whose signature Cython does not embed: call with them
        runtime(**dict.fromkeys(stub_params, 1))
