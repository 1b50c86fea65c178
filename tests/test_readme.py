"""The llamacore examples of README.md and of the docs pages (docs/**/*.md) run as written, with
generated models in place of the named files.

A ```python block is an example to run when it contains `from llamacore import`; blocks that need a
server or the network (OpenAI clients, Llama.from_pretrained) leave that line out.
"""

import os
import re
from pathlib import Path

import pytest
from helpers import N_THREADS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def llamacore_examples() -> list[tuple[str, str]]:
    """(id, code) for each example: the page's path and the example's number on that page."""
    examples = []
    for page in PAGES:
        blocks = [b for b in python_blocks(page.read_text()) if "from llamacore import" in b]
        name = page.relative_to(ROOT).as_posix()
        examples += [(f"{name}#{i}", block) for i, block in enumerate(blocks)]
    return examples


EXAMPLES = llamacore_examples()


@pytest.fixture(scope="module")
def substitutions(tiny_model_path, lora_a_path, lora_b_path, embed_model_path, projector_path, tmp_path_factory):
    from tiny_vision import image_bytes, pattern_image

    photo = tmp_path_factory.mktemp("readme") / "photo.png"
    photo.write_bytes(image_bytes(pattern_image(0)))
    return {'"model.gguf"': repr(str(tiny_model_path)), '"coder-lora.gguf"': repr(str(lora_a_path)),
            '"style-lora.gguf"': repr(str(lora_b_path)),
            '"all-MiniLM-L6-v2-f16.gguf"': repr(str(embed_model_path)),
            '"mmproj.gguf"': repr(str(projector_path)), '"photo.png"': repr(str(photo))}


def test_the_pages_have_the_llamacore_examples():
    # README's drop-in, getting started, from llama-cpp-python, and the library pages: Llama (3),
    # low level (2), LoRA (1); a page that loses one (or a block whose fence broke) shows here
    assert len(EXAMPLES) == 9, [name for name, _ in EXAMPLES]
    assert any(name == "README.md#0" for name, _ in EXAMPLES)


@pytest.mark.parametrize("example", [code for _, code in EXAMPLES], ids=[name for name, _ in EXAMPLES])
def test_llamacore_example_runs(example, request, substitutions, capsys, monkeypatch):
    # the examples leave n_threads at its default (os.cpu_count()): follow LLAMACORE_TEST_THREADS
    monkeypatch.setattr(os, "cpu_count", lambda: N_THREADS)
    for name, path in substitutions.items():
        example = example.replace(name, path)
    exec(compile(example, request.node.callspec.id, "exec"), {})
    assert capsys.readouterr().out
