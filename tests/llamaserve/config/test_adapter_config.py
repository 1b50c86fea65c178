"""Config keys for adapters: an entry's `adapters` list (optional names), adapters_dir, persist_adapters.

Each problem is one line naming the file, the key and a fix, like every other config key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, problems, yaml_config

from llamaserve.cli import describe
from llamaserve.config.parse import load_config
from llamaserve.lora.catalog import name_adapters


def test_adapters_list_with_and_without_names(work):
    (work / "adapters").mkdir(exist_ok=True)
    path = yaml_config(work, """
adapters_dir: adapters
models:
  - alias: base
    model: models/model.gguf
    adapters: [models/lora-a.gguf, {path: models/lora-b.gguf, name: style}]
  - {alias: coder, model: models/model.gguf, lora_adapters: {models/lora-a.gguf: 0.5}}
""")
    config = load_config(path)
    base, coder = config.models
    m = work / "models"
    assert base.adapters == ((m / "lora-a.gguf", None), (m / "lora-b.gguf", "style"))
    assert base.lora_adapters == () and coder.adapters == ()
    assert name_adapters(config.models)[0] == {m / "lora-a.gguf": "lora-a", m / "lora-b.gguf": "style"}
    assert config.adapters_dirs == (Path(os.path.realpath(work / "adapters")),) and not config.persist_adapters
    text = describe(config)
    assert f"runtime adapters: {os.path.realpath(work / 'adapters')}  persisted: no" in text
    assert f"adapter: {m / 'lora-b.gguf'} (name style)" in text


def test_adapters_dir_list_follows_symlinks_and_persist(work, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (tmp_path / "link").symlink_to(one, target_is_directory=True)
    path = yaml_config(work, f"""
adapters_dir: [{tmp_path / 'link'}, {two}, {one}]
persist_adapters: true
models: [{{alias: a, model: models/model.gguf}}]
""")
    config = load_config(path)
    assert config.adapters_dirs == (Path(os.path.realpath(one)), Path(os.path.realpath(two)))
    assert config.persist_adapters


@pytest.mark.parametrize("lines, expected", [
    ("adapter_dir: adapters", ["adapter_dir: unknown key (did you mean 'adapters_dir'?)"]),
    ("adapters_dir: nowhere", ["adapters_dir: not a directory: {work}/nowhere"]),
    ("adapters_dir: {}", ["adapters_dir: expected a folder or a list of folders, got {{}}"]),
    ("adapters_dir: []\npersist_adapters: true", ["persist_adapters: needs adapters_dir"]),   # [] is none
    ("adapters_dir: [models, 5]", ["adapters_dir: expected a non-empty string, got 5"]),
    ("persist_adapters: true", ["persist_adapters: needs adapters_dir"]),
    ("persist_adapters: sometimes", ["persist_adapters: expected true or false, got 'sometimes'"]),
    ("adapters_dir: [models, nowhere]", ["adapters_dir[1]: not a directory: {work}/nowhere"]),
])
def test_root_key_problems(work, lines, expected):
    path = yaml_config(work, f"{lines}\nmodels: [{{alias: a, model: models/model.gguf}}]\n")
    found = problems(path)
    assert len(found) == len(expected), found
    for line, message in zip(found, expected):
        assert line.startswith(f"{path}: {message.format(work=work)}"), found


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to any folder")
def test_persist_needs_a_writable_folder(work, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        path = yaml_config(work, f"adapters_dir: {folder}\npersist_adapters: true\n"
                                 "models: [{alias: a, model: models/model.gguf}]\n")
        assert problems(path) == [f"{path}: adapters_dir: not writable, and persist_adapters: true keeps "
                                  f"llamaserve-adapters.json there: {folder}"]
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("adapters, message", [
    ("models/lora-a.gguf", "models[0].adapters: expected a list of adapter paths or {path: ..., name: ...} mappings"),
    ("[5]", "models[0].adapters[0]: expected an adapter path or a {path: ..., name: ...} mapping, got 5"),
    ("[{name: x}]", "models[0].adapters[0]: path and name: expected a non-empty string, got None"),
    ("[{path: models/lora-a.gguf, name: ''}]", "models[0].adapters[0]: path and name: expected a non-empty string"),
    ("[{path: models/lora-a.gguf, nmae: x}]", "models[0].adapters[0].nmae: unknown key (did you mean 'name'?)"),
    ("[{path: models/lora-a.gguf, scale: 0.5}]",
     "models[0].adapters[0].scale: unknown key (adapters listed here apply only to requests that name them"),
    ("[models/missing.gguf]", "models[0].adapters: file not found: {work}/models/missing.gguf"),
    ("[models/lora-gpt2.gguf]", "models[0].adapters: adapter lora-gpt2.gguf is for architecture 'gpt2'"),
    ("[models/model.gguf]", "models[0].adapters: model.gguf is not a LoRA adapter (general.type is not set"),
    ("[models/not-gguf.gguf]", "models[0].adapters: {work}/models/not-gguf.gguf is not a readable GGUF file"),
])
def test_adapters_list_problems(work, adapters, message):
    path = yaml_config(work, f"models: [{{alias: a, model: models/model.gguf, adapters: {adapters}}}]\n")
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{path}: " + message.replace("{work}", str(work))), found


def test_adapter_names_are_unique_per_base(work):
    (work / "other").mkdir(exist_ok=True)
    (work / "other/lora-a.gguf").write_bytes((work / "models/lora-a.gguf").read_bytes())
    path = yaml_config(work, """
models:
  - {alias: a, model: models/model.gguf, adapters: [{path: models/lora-a.gguf, name: one}]}
  - {alias: b, model: models/model.gguf, adapters: [{path: models/lora-a.gguf, name: two}]}
  - {alias: c, model: models/model.gguf, lora_adapters: [models/lora-b.gguf],
     adapters: [{path: other/lora-a.gguf, name: lora-b}]}
  - {alias: d, model: models/model.gguf, n_ctx: 512, adapters: [{path: models/lora-b.gguf, name: one}]}
""")
    m = work / "models"
    assert problems(path) == [
        f"{path}: models[1].adapters: lora-a.gguf is already named 'one' on this base model (by a); "
        "a file has one name per base",
        f"{path}: models[2].adapters: adapters {m / 'lora-b.gguf'} and {work / 'other/lora-a.gguf'} on one base "
        "model are both named 'lora-b'; name one in adapters: [{path: ..., name: ...}]",
    ]   # d loads its own base (another n_ctx): its names are its own


@pytest.mark.parametrize("scale", ["10.5", "-11", ".nan"])
def test_configured_scales_are_bounded_like_request_scales(work, scale):
    path = yaml_config(work, f"models: [{{alias: a, model: models/model.gguf, "
                             f"lora_adapters: {{models/lora-a.gguf: {scale}}}}}]\n")
    found = problems(path)
    assert len(found) == 1 and "models[0].lora_adapters['models/lora-a.gguf']: " in found[0], found


def test_cli_flags_for_runtime_adapters(work, tmp_path):
    folder = tmp_path / "rt"
    folder.mkdir()
    run = [sys.executable, "-m", "llamaserve"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    helptext = subprocess.run([*run, "--help"], capture_output=True, text=True, env=env).stdout
    assert "--adapters-dir DIR" in helptext and "--persist-adapters" in helptext
    proc = subprocess.run([*run, "--model", str(work / "models/model.gguf"), "--adapters-dir", str(folder),
                           "--persist-adapters", "--print-config"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"runtime adapters: {os.path.realpath(folder)}  persisted: yes" in proc.stdout
