"""Small GGUF files for config and discovery tests: header-only fakes and cheap copies of real ones."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import gguf


def fake_gguf(path: Path, arch: str = "llama", kind: str | None = None,
              endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE, every_type: bool = False) -> Path:
    """A header-only GGUF (no tensors) with a token array before general.type, so readers must skip it.

    `every_type` adds one value of each other GGUF type as well.
    """
    w = gguf.GGUFWriter(path, arch, endianess=endian)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello"])
    if every_type:
        w.add_array("test.nested", [[1, 2], [3]])
        w.add_array("test.floats", [0.5, 1.5])
        w.add_uint8("test.u8", 7)
        w.add_int64("test.i64", -5)
        w.add_float64("test.f64", 2.5)
        w.add_bool("test.flag", True)
    if kind:
        w.add_type(kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def place(src: Path, dst: Path) -> Path:
    """`src` at `dst` as a hard link when possible (models are large), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst
