"""The README's llamacore examples run as written (with generated models in place of the named files)."""

import os
import re
from pathlib import Path

import pytest
from helpers import N_THREADS

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.fixture(scope="module")
def substitutions(tiny_model_path, lora_a_path, lora_b_path, embed_model_path, projector_path, tmp_path_factory):
    from tiny_vision import image_bytes, pattern_image

    photo = tmp_path_factory.mktemp("readme") / "photo.png"
    photo.write_bytes(image_bytes(pattern_image(0)))
    return {'"model.gguf"': repr(str(tiny_model_path)), '"coder-lora.gguf"': repr(str(lora_a_path)),
            '"style-lora.gguf"': repr(str(lora_b_path)),
            '"all-MiniLM-L6-v2-f16.gguf"': repr(str(embed_model_path)),
            '"mmproj.gguf"': repr(str(projector_path)), '"photo.png"': repr(str(photo))}


LLAMACORE_BLOCKS = [b for b in python_blocks(README.read_text()) if "from llamacore import" in b]


def test_readme_has_the_llamacore_examples():
    assert len(LLAMACORE_BLOCKS) == 6


@pytest.mark.parametrize("index", range(len(LLAMACORE_BLOCKS)))
def test_readme_llamacore_example_runs(index, substitutions, capsys, monkeypatch):
    # the examples leave n_threads at its default (os.cpu_count()): follow LLAMACORE_TEST_THREADS
    monkeypatch.setattr(os, "cpu_count", lambda: N_THREADS)
    block = LLAMACORE_BLOCKS[index]
    for name, path in substitutions.items():
        block = block.replace(name, path)
    exec(compile(block, f"README block {index}", "exec"), {})
    assert capsys.readouterr().out
