"""llamaserve.config.parse: config files (YAML, TOML, JSON), env interpolation, defaults, paths, unreadable files."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT, problems, write, yaml_config

from llamacore.vision.media import MediaPolicy
from llamaserve.config.parse import ConfigError, ModelEntry, ServerConfig, load_config, parse_config

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
    # list values are made hashable: equal lists give equal keys, other lists other keys
    split = ModelEntry("y", (), chat.model, load={"n_ctx": 1024, "tensor_split": [0.5, 0.5]})
    same = ModelEntry("z", (), chat.model, load={"tensor_split": [0.5, 0.5], "n_ctx": 1024})
    assert hash(split.base_key()) == hash(same.base_key()) and split.base_key() == same.base_key()
    assert {split.base_key(): "loaded"}[same.base_key()] == "loaded"
    other_split = ModelEntry("w", (), chat.model, load={"n_ctx": 1024, "tensor_split": [0.25, 0.75]})
    assert other_split.base_key() != split.base_key()


# -- environment, defaults, paths ------------------------------------------------------------


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


def test_the_vision_docs_media_defaults_load(work, projector_path):
    """docs/server/vision.md's media block, "the defaults", loads as written and is the default policy."""
    page = (REPO_ROOT / "docs" / "server" / "vision.md").read_text()
    start = page.index("```yaml\n") + 8
    data = yaml.safe_load(page[start:page.index("```\n", start)])
    assert data["media"]["allowed_dirs"] == []
    data["models"][0].update(model="models/model.gguf", clip_model_path=str(projector_path))
    config = load_config(write(work, "vision.yaml", yaml.safe_dump(data)))
    assert config.media == MediaPolicy()


# -- unreadable files ------------------------------------------------------------------------


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


@pytest.mark.parametrize("name, text, where", [
    ("bad.yaml", "host: x\nmodels:\n  - model: [a\n", "line 4, column 1: invalid YAML: expected ',' or ']'"),
    ("tab.yaml", "host: x\n\tport: 1\n", "line 2, column 1: invalid YAML: found character '\\t'"),
    ("bad.toml", "host = 'x'\nport = \n", "invalid TOML: Invalid value (at line 2, column 8)"),
    # the json module's wording and position for a trailing comma changed in Python 3.13
    ("bad.json", '{\n"port": 1,\n}\n', r"line (3, column 1|2, column 10): invalid JSON: "
                                        r"(Expecting property name|Illegal trailing comma)"),
])
def test_syntax_errors_name_the_file_and_line(work, name, text, where):
    path = write(work, f"bad/{name}", text)
    (line,) = problems(path)
    pattern = where if name.endswith(".json") else re.escape(where)
    assert re.match(re.escape(f"{path}: ") + pattern, line) and "<unicode string>" not in line


def test_missing_config_file(work):
    assert problems(work / "absent.yaml") == [f"{work / 'absent.yaml'}: file not found"]


def test_parse_config_without_a_file_is_labelled_command_line(work):
    with pytest.raises(ConfigError) as info:
        parse_config({"port": "x", "models": [{"model": "models/model.gguf"}]}, None, work)
    assert info.value.problems == ["<command line>: port: expected an integer, got 'x'"]
    assert parse_config({"models": [{"model": "models/model.gguf"}]}, None, work) == ServerConfig(
        models=(ModelEntry("model", (), work / "models/model.gguf"),))
