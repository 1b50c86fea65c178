"""llamaserve.config.parse models_dir discovery: which GGUF files in a folder become models, adapters or skips."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from gguf_files import fake_gguf, place
from helpers import NO_MODELS, problems, yaml_config

from llamaserve.config.discovery import scan_models_dir
from llamaserve.config.parse import parse_config


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
