"""llamaserve.config against real generated GGUF files and configs on disk (no mocks)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import gguf
import pytest
from gguf_files import fake_gguf, place

from llamaserve.config import (
    ConfigError,
    ModelEntry,
    ServerConfig,
    load_config,
    parse_config,
    parse_duration,
    parse_size,
    scan_models_dir,
)


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model_path, lora_a_path, lora_b_path, lora_other_arch_path) -> Path:
    """A folder with models/{model,lora-a,lora-b,lora-gpt2,not-gguf}.gguf; configs go next to it."""
    root = tmp_path_factory.mktemp("config")
    models = root / "models"
    models.mkdir()
    for src, name in ((tiny_model_path, "model.gguf"), (lora_a_path, "lora-a.gguf"),
                      (lora_b_path, "lora-b.gguf"), (lora_other_arch_path, "lora-gpt2.gguf")):
        place(src, models / name)
    (models / "not-gguf.gguf").write_bytes(b"PK\x03\x04 this is a zip file, not a model")
    return root


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def yaml_config(work: Path, body: str) -> Path:
    return write(work, "config.yaml", body)


NO_MODELS = "no models configured (add a models list, or a models_dir with GGUF models)"


# -- formats ---------------------------------------------------------------------------------

YAML = """
host: 0.0.0.0
port: 8080
default_model: coder
max_loaded_models: 2
memory_budget: 12GiB
idle_unload: 120
cors: ["http://localhost:3000"]
defaults:
  n_ctx: 1024
  n_gpu_layers: -1
  kv_overrides: {tokenizer.ggml.add_bos_token: false}
models:
  - alias: chat
    aliases: [gpt-4, gpt-4o]
    model: models/model.gguf
  - model_alias: coder
    model: models/model.gguf
    lora_adapters: {models/lora-a.gguf: 1.0, models/lora-b.gguf: 0.5}
    parallel: 2
"""
TOML = """
host = "0.0.0.0"
port = 8080
default_model = "coder"
max_loaded_models = 2
memory_budget = "12GiB"
idle_unload = 120
cors = ["http://localhost:3000"]

[defaults]
n_ctx = 1024
n_gpu_layers = -1
kv_overrides = {"tokenizer.ggml.add_bos_token" = false}

[[models]]
alias = "chat"
aliases = ["gpt-4", "gpt-4o"]
model = "models/model.gguf"

[[models]]
model_alias = "coder"
model = "models/model.gguf"
lora_adapters = {"models/lora-a.gguf" = 1.0, "models/lora-b.gguf" = 0.5}
parallel = 2
"""


def test_yaml_toml_and_json_give_equal_configs(work):
    import yaml

    texts = {"fmt.yaml": YAML, "fmt.toml": TOML, "fmt.json": json.dumps(yaml.safe_load(YAML)),
             "fmt.yml": YAML}
    configs = [load_config(write(work, name, text)) for name, text in texts.items()]
    assert all(replace(c, source=None) == replace(configs[0], source=None) for c in configs)
    assert [c.source for c in configs] == [work / name for name in texts]


def test_values_are_resolved_and_typed(work):
    config = load_config(write(work, "config.yaml", YAML))
    models = work / "models"
    assert (config.host, config.port, config.max_loaded_models) == ("0.0.0.0", 8080, 2)
    assert config.memory_budget == 12 * 2**30 and config.idle_unload == 120
    assert config.cors_origins == ("http://localhost:3000",) and config.api_key is None
    assert config.models_dir is None and config.parallel == 4 and config.max_body_bytes == 4 * 2**20
    chat, coder = config.models
    assert chat.names() == ("chat", "gpt-4", "gpt-4o") and chat.model == models / "model.gguf"
    assert coder.alias == "coder" and coder.parallel == 2 and chat.parallel is None
    assert coder.lora_adapters == ((models / "lora-a.gguf", 1.0), (models / "lora-b.gguf", 0.5))
    assert dict(chat.load) == {"n_ctx": 1024, "n_gpu_layers": -1,
                               "kv_overrides": {"tokenizer.ggml.add_bos_token": False}}
    assert config.find("gpt-4o") is chat and config.find("nope") is None
    assert config.default_entry() is coder
    assert replace(config, default_model=None).default_entry() is chat


def test_base_key_groups_entries_that_share_a_loaded_model(work):
    chat, coder = load_config(write(work, "config.yaml", YAML)).models
    assert chat.base_key() == coder.base_key()
    hash(chat.base_key())
    other = ModelEntry("x", (), chat.model, load={**chat.load, "n_ctx": 2048})
    assert other.base_key() != chat.base_key()
    assert ModelEntry("y", (), chat.model, load={"n_ctx": 1024, "tensor_split": [0.5, 0.5]}).base_key()


def test_env_interpolation(work, monkeypatch):
    monkeypatch.setenv("LS_MODELS", str(work / "models"))
    monkeypatch.setenv("LS_PORT", "9001")
    monkeypatch.setenv("LS_KEY", "s3cret")
    monkeypatch.delenv("LS_UNSET", raising=False)
    path = write(work, "env/config.yaml", """
port: ${LS_PORT}
api_key: ${LS_KEY}
host: ${LS_UNSET:-127.0.0.2}
defaults: {use_mmap: "${LS_UNSET:-false}", n_ctx: "${LS_UNSET:-2048}"}
models:
  - alias: m-${LS_UNSET:-tiny}
    model: ${LS_MODELS}/model.gguf
    lora_adapters: {"${LS_MODELS}/lora-a.gguf": 0.25}
""")
    config = load_config(path)
    assert (config.port, config.api_key, config.host) == (9001, "s3cret", "127.0.0.2")
    (entry,) = config.models
    assert entry.alias == "m-tiny" and entry.model == work / "models/model.gguf"
    assert entry.lora_adapters == ((work / "models/lora-a.gguf", 0.25),)
    assert dict(entry.load) == {"use_mmap": False, "n_ctx": 2048}


def test_unset_env_var_without_default_names_variable_and_key(work, monkeypatch):
    monkeypatch.delenv("LS_NOT_THERE", raising=False)
    path = yaml_config(work, "models:\n  - model: ${LS_NOT_THERE}/m.gguf\n")
    found = problems(path)
    assert any(p.startswith(f"{path}: models[0].model: environment variable LS_NOT_THERE is not set")
               for p in found), found


def test_empty_env_default_leaves_the_api_key_unset(work, monkeypatch):
    monkeypatch.delenv("LS_UNSET", raising=False)
    path = yaml_config(work, "api_key: ${LS_UNSET:-}\nmodels: [{model: models/model.gguf}]\n")
    assert load_config(path).api_key is None


def test_env_value_that_is_not_a_number_is_a_type_error(work, monkeypatch):
    monkeypatch.setenv("LS_PORT", "http")
    path = yaml_config(work, "port: ${LS_PORT}\nmodels: [{model: models/model.gguf}]\n")
    assert problems(path) == [f"{path}: port: expected an integer, got 'http'"]


def test_defaults_merge_and_entry_wins(work):
    path = yaml_config(work, """
defaults:
  {n_ctx: 1024, n_threads: 2, chat_format: chatml, lora_adapters: [models/lora-a.gguf], idle_unload: 5m}
models:
  - {alias: a, model: models/model.gguf}
  - {alias: b, model: models/model.gguf, n_ctx: 4096, lora_adapters: {}, idle_unload: never, max_queue: 0}
""")
    a, b = load_config(path).models
    assert dict(a.load) == {"n_ctx": 1024, "n_threads": 2} and a.chat_format == "chatml"
    assert a.lora_adapters == ((work / "models/lora-a.gguf", 1.0),) and a.idle_unload == 300
    assert dict(b.load) == {"n_ctx": 4096, "n_threads": 2} and b.lora_adapters == ()
    assert b.idle_unload == math.inf and b.max_queue == 0 and a.max_queue is None


def test_relative_paths_resolve_against_the_config_folder(work, monkeypatch):
    path = write(work, "deep/er/config.yaml",
                 "models_dir: ../../models\nmodels:\n  - {alias: x, model: ../../models/./model.gguf}\n")
    monkeypatch.chdir(work / "models")   # the working directory must not matter
    config = load_config(Path(os.path.relpath(path)))
    assert config.models_dir == work / "models"
    assert config.models[0].model == work / "models/model.gguf"
    assert config.source == path


def test_omitted_alias_is_the_file_stem(work):
    config = load_config(yaml_config(work, "models: [{model: models/model.gguf}]"))
    assert config.models[0].alias == "model"


# -- models_dir ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, tiny_model_path, lora_a_path) -> Path:
    """A models_dir with one of each kind of file discovery must tell apart."""
    d = tmp_path_factory.mktemp("zoo")
    place(tiny_model_path, d / "tiny.gguf")
    place(lora_a_path, d / "tiny-lora.gguf")
    fake_gguf(d / "plain.gguf")
    fake_gguf(d / "typed.gguf", kind="model", endian=gguf.GGUFEndian.BIG)
    fake_gguf(d / "adapter.gguf", kind="adapter")
    fake_gguf(d / "mmproj-model-f16.gguf")
    fake_gguf(d / "vision.gguf", arch="clip")
    fake_gguf(d / "projector.gguf", kind="mmproj")
    fake_gguf(d / "big-00001-of-00003.gguf")
    fake_gguf(d / "big-00002-of-00003.gguf")
    fake_gguf(d / "big-00003-of-00003.gguf")
    (d / "junk.gguf").write_bytes(b"not a gguf at all")
    (d / "notes.txt").write_text("ignored")
    (d / "sub").mkdir()
    fake_gguf(d / "sub" / "nested.gguf")
    return d


def test_scan_models_dir(zoo):
    scan = scan_models_dir(zoo)
    assert [(alias, path.name) for alias, path, _ in scan.models] == [
        ("big", "big-00001-of-00003.gguf"), ("plain", "plain.gguf"), ("tiny", "tiny.gguf"),
        ("typed", "typed.gguf")]
    assert [(p.name, arch) for p, arch in scan.adapters] == [
        ("adapter.gguf", "llama"), ("tiny-lora.gguf", "llama")]
    assert [p.name for p, _ in scan.unreadable] == ["junk.gguf"]


def test_models_dir_discovery_and_explicit_entries_win(zoo, caplog):
    config = parse_config({"models_dir": str(zoo), "defaults": {"n_ctx": 256},
                           "models": [{"alias": "plain", "model": "tiny.gguf", "n_ctx": 64}]}, None, zoo)
    assert [m.alias for m in config.models] == ["plain", "big", "tiny", "typed"]
    assert config.models[0].model == zoo / "tiny.gguf" and config.models[0].load["n_ctx"] == 64
    assert all(dict(m.load) == {"n_ctx": 256} for m in config.models[1:])
    assert config.models[1].model == zoo / "big-00001-of-00003.gguf"
    assert "junk.gguf" in caplog.text


def test_models_dir_alone_and_missing(zoo, work):
    config = parse_config({"models_dir": "."}, None, zoo)
    assert [m.alias for m in config.models] == ["big", "plain", "tiny", "typed"]
    path = yaml_config(work, "models_dir: no/such/dir\n")
    assert problems(path) == [f"{path}: models_dir: not a directory: {work / 'no/such/dir'}",
                              f"{path}: models: {NO_MODELS}"]


# -- validation ------------------------------------------------------------------------------


def test_unknown_keys_get_did_you_mean(work):
    path = yaml_config(work, """
prot: 8000
defaults: {n_gpu_layer: 1}
models:
  - {alias: a, model: models/model.gguf}
  - {alias: b, model: models/model.gguf, n_cxt: 512, zzzz: 1}
""")
    assert problems(path) == [
        f"{path}: prot: unknown key (did you mean 'port'?)",
        f"{path}: defaults.n_gpu_layer: unknown key (did you mean 'n_gpu_layers'?)",
        f"{path}: models[1].n_cxt: unknown key (did you mean 'n_ctx'?)",
        f"{path}: models[1].zzzz: unknown key",
    ]


@pytest.mark.parametrize("line, message", [
    ("port: abc", "port: expected an integer, got 'abc'"),
    ("port: 0", "port: must be between 1 and 65535, got 0"),
    ("port: -1", "port: must be between 1 and 65535, got -1"),
    ("port: true", "port: expected an integer, got True"),
    ("max_loaded_models: 0", "max_loaded_models: must be at least 1, got 0"),
    ("memory_budget: 12 gigs", "memory_budget: invalid size '12 gigs'"),
    ("memory_budget: 0", "memory_budget: must be greater than zero, got 0"),
    ("max_body_bytes: lots", "max_body_bytes: invalid size 'lots'"),
    ("idle_unload: soon", "idle_unload: invalid duration 'soon'"),
    ("log_level: verbose", ("log_level: expected one of critical, error, warning, info, debug, trace, "
                           "got 'verbose'")),
    ("cors: 5", "cors: expected a list of strings, got 5"),
    ("host: ''", "host: expected a non-empty string, got ''"),
    ("defaults: [1]", "defaults: expected a mapping, got [1]"),
    ("defaults: {alias: x}", "defaults.alias: not allowed in defaults"),
    ("defaults: {n_ctx: big}", "defaults.n_ctx: expected an integer, got 'big'"),
    ("defaults: {use_mmap: 'yes'}", "defaults.use_mmap: expected true or false, got 'yes'"),
    ("defaults: {flash_attn: maybe}", "defaults.flash_attn: expected true, false, auto, on or off"),
    ("defaults: {type_k: q9}", "defaults.type_k: expected one of f32, f16"),
    ("defaults: {split_mode: rows}", ("defaults.split_mode: expected one of none, layer, row, got 'rows' "
                                     "(did you mean 'row'?)")),
    ("defaults: {pooling_type: meen}", "defaults.pooling_type: expected one of unspecified"),
    ("defaults: {tensor_split: [1, x]}", "defaults.tensor_split: expected a number, got 'x'"),
    ("defaults: {kv_overrides: [1]}", "defaults.kv_overrides: expected a mapping of metadata keys"),
    ("defaults: {parallel: 0}", "defaults.parallel: must be at least 1, got 0"),
])
def test_wrong_types_and_ranges(work, line, message):
    path = yaml_config(work, f"{line}\nmodels: [{{alias: a, model: models/model.gguf}}]\n")
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{path}: {message}"), found


def test_missing_and_non_gguf_files(work):
    path = yaml_config(work, """
models:
  - {alias: a, model: models/missing.gguf}
  - {alias: b, model: models/not-gguf.gguf}
  - {alias: c, model: models/model.gguf, lora_adapters: [models/missing-lora.gguf]}
  - {alias: d, model: models/lora-a.gguf}
  - {alias: e}
""")
    m = work / "models"
    assert problems(path) == [
        f"{path}: models[0].model: file not found: {m / 'missing.gguf'}",
        (f"{path}: models[1].model: {m / 'not-gguf.gguf'} is not a readable GGUF file: "
         "not a GGUF file (bad magic b'PK\\x03\\x04')"),
        f"{path}: models[2].lora_adapters: file not found: {m / 'missing-lora.gguf'}",
        f"{path}: models[3].model: lora-a.gguf is a LoRA adapter, not a model (general.type is 'adapter')",
        f"{path}: models[4].model: required (the path of a GGUF model file)",
    ]


def test_adapter_checks(work):
    path = yaml_config(work, """
models:
  - {alias: a, model: models/model.gguf, lora_adapters: {models/lora-a.gguf: 1.0}}
  - {alias: b, model: models/model.gguf, lora_adapters: {models/lora-gpt2.gguf: 1.0}}
  - {alias: c, model: models/model.gguf, lora_adapters: [models/model.gguf]}
  - {alias: d, model: models/model.gguf, lora_adapters: {models/lora-a.gguf: strong}}
  - {alias: e, model: models/model.gguf, lora_adapters: models/lora-a.gguf}
""")
    assert problems(path) == [
        (f"{path}: models[1].lora_adapters: adapter lora-gpt2.gguf is for architecture 'gpt2', "
         "model is 'llama'"),
        (f"{path}: models[2].lora_adapters: model.gguf is not a LoRA adapter (general.type is not set, "
         f"not 'adapter'): {work / 'models/model.gguf'}"),
        f"{path}: models[3].lora_adapters['models/lora-a.gguf']: expected a number, got 'strong'",
        (f"{path}: models[4].lora_adapters: expected a mapping of adapter paths to scales or a list of "
         "paths, got 'models/lora-a.gguf'"),
    ]


def test_duplicate_aliases(work):
    path = yaml_config(work, """
models:
  - {alias: chat, aliases: [gpt-4], model: models/model.gguf}
  - {alias: other, aliases: [gpt-4, other], model: models/model.gguf}
  - {alias: chat, model: models/model.gguf}
  - {alias: a, model_alias: b, model: models/model.gguf}
""")
    assert problems(path) == [
        f"{path}: models[3].model_alias: give either alias or model_alias, not both",
        f"{path}: models[1].aliases[0]: duplicate alias 'gpt-4' (also models[0])",
        f"{path}: models[2].alias: duplicate alias 'chat' (also models[0])",
    ]


def test_default_model_and_chat_format_must_exist(work):
    path = yaml_config(work, """
default_model: chta
models:
  - {alias: chat, model: models/model.gguf, chat_format: llama3}
  - {alias: ok, model: models/model.gguf, chat_format: llama-2}
""")
    found = problems(path)
    assert found[0] == f"{path}: default_model: no model named 'chta' (did you mean 'chat'?)"
    assert found[1].startswith(f"{path}: models[0].chat_format: unknown chat format 'llama3' "
                               "(did you mean 'llama-3'?); known: chatml, ")
    assert len(found) == 2


def test_no_models_at_all(work):
    for body in ("port: 8000\n", "", "models: []\n"):
        path = yaml_config(work, body)
        assert problems(path) == [f"{path}: models: {NO_MODELS}"]


def test_all_problems_are_reported_at_once(work):
    path = yaml_config(work, "port: x\nmax_loaded_models: 0\n"
                             "models:\n  - {alias: a, model: nope.gguf, n_cxt: 1}\n")
    assert len(problems(path)) == 4


@pytest.mark.parametrize("name, text, message", [
    ("bad.yaml", "models: [unclosed", "invalid YAML"),
    ("bad.toml", "port = ", "Invalid value"),
    ("bad.json", "{port: 1}", "Expecting property name"),
    ("list.yaml", "- 1\n- 2\n", "expected a mapping at the top level, got list"),
    ("config.ini", "port=1", "unsupported config type '.ini' (use .yaml, .yml, .toml or .json)"),
])
def test_unreadable_config_files(work, name, text, message):
    path = write(work, f"bad/{name}", text)
    (line,) = problems(path)
    assert line.startswith(f"{path}: ") and message in line


def test_missing_config_file(work):
    assert problems(work / "absent.yaml") == [f"{work / 'absent.yaml'}: file not found"]


def test_parse_config_without_a_file_is_labelled_command_line(work):
    with pytest.raises(ConfigError) as info:
        parse_config({"port": "x", "models": [{"model": "models/model.gguf"}]}, None, work)
    assert info.value.problems == ["<command line>: port: expected an integer, got 'x'"]
    assert parse_config({"models": [{"model": "models/model.gguf"}]}, None, work) == ServerConfig(
        models=(ModelEntry("model", (), work / "models/model.gguf"),))


# -- sizes and durations ---------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    (1024, 1024), ("1024", 1024), ("500MB", 500_000_000), ("12GiB", 12 * 2**30), ("2G", 2 * 2**30),
    ("64 kb", 64_000), ("1.5KiB", 1536), ("1TB", 10**12), ("3m", 3 * 2**20), ("7 B", 7), (0, 0),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["abc", "-1", "12XB", "", "GB", -5, True, 1.5, None])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


@pytest.mark.parametrize("value, expected", [
    (300, 300.0), (0.5, 0.5), ("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1.5h", 5400.0),
    ("never", math.inf),
])
def test_parse_duration(value, expected):
    assert parse_duration(value) == expected


@pytest.mark.parametrize("value", ["5d", "-1", -1, "", True])
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(value)
