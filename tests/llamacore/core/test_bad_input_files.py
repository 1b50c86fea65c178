"""Bad model and adapter files (missing, a folder, text, empty, truncated) raise Python exceptions.

Each load runs in a child interpreter (isolation.run_cases), so a file that makes llama.cpp abort
fails its own case instead of killing pytest. The table maps a case name to the statement, the
exception it must raise and a fragment its message must contain.
"""

from __future__ import annotations

import pytest
from helpers import describe
from isolation import Case, run_table

import llamacore

TRUNCATIONS = ["10", "100", "1000", "half", "minus1"]


def model(name: str) -> str:
    return f"llamacore.Model(files[{name!r}])"


def adapter(name: str) -> str:
    return f"llamacore.LoraAdapter(llamacore.Model(good), files[{name!r}])"


FILE_CASES = {
    "missing": Case(model("missing"), FileNotFoundError),
    "dir": Case(model("dir"), IsADirectoryError),
    "text": Case(model("text"), ValueError, "not a GGUF"),
    "empty": Case(model("empty"), ValueError, "not a GGUF"),
    "magic_garbage": Case(model("magic_garbage"), ValueError, "failed to load model"),
    **{f"trunc_{where}": Case(model(f"trunc_{where}"), ValueError, "failed to load model")
       for where in TRUNCATIONS},
    "lora_trunc": Case(adapter("lora_trunc"), ValueError, "failed to load LoRA adapter"),
    "lora_text": Case(adapter("text"), ValueError, "not a GGUF"),
    "lora_missing": Case(adapter("missing"), FileNotFoundError),
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, tiny_model_path, lora_a_path):
    d = tmp_path_factory.mktemp("bad_files")
    data = tiny_model_path.read_bytes()
    files = {"missing": d / "missing.gguf", "dir": d}
    (d / "text.gguf").write_text("this is a text file, not a model\n" * 10)
    files["text"] = d / "text.gguf"
    (d / "empty.gguf").write_bytes(b"")
    files["empty"] = d / "empty.gguf"
    (d / "magic-only.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 4)
    files["magic_garbage"] = d / "magic-only.gguf"
    for label, off in zip(TRUNCATIONS, [10, 100, 1000, len(data) // 2, len(data) - 1]):
        p = d / f"trunc-{label}.gguf"
        p.write_bytes(data[:off])
        files[f"trunc_{label}"] = p
    lora = lora_a_path.read_bytes()
    (d / "lora-trunc.gguf").write_bytes(lora[: len(lora) // 2])
    files["lora_trunc"] = d / "lora-trunc.gguf"
    return files


@pytest.fixture(scope="module")
def file_group(bad_files, tiny_model_path):
    paths = {k: str(v) for k, v in bad_files.items()}
    setup = f"import llamacore\nfiles = {paths!r}\ngood = {str(tiny_model_path)!r}\n"
    return run_table(setup, FILE_CASES)


@pytest.mark.parametrize("name", list(FILE_CASES))
def test_bad_file(file_group, name):
    file_group.expect_case(name, FILE_CASES[name])


def test_missing_file_in_process(tmp_path):
    with pytest.raises(FileNotFoundError):  # checked before llama.cpp sees the path
        llamacore.Model(tmp_path / "nope.gguf")


def test_group_completes(file_group):
    """No case killed the child, and it ran to its end and exited cleanly."""
    assert not file_group.crashes(), file_group.crashes()
    assert not file_group.stray, file_group.stray
    assert [p.returncode for p in file_group.procs] == [0], [describe(p) for p in file_group.procs]
