"""GGUF files for tests: header-only fakes, cheap copies of real ones, and byte-level surgery.

The surgery kit (`Layout`, `patched`, `encode_kv`, ...) edits a generated file in place of a
real corrupt one: patch a count or an offset, or rebuild the key/value section with entries
replaced, dropped or added.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import gguf
import numpy as np

VT = gguf.GGUFValueType


def finish(w: gguf.GGUFWriter, path: Path) -> Path:
    """Write out everything added to `w` and close it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


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
    return finish(w, path)


def place(src: Path, dst: Path) -> Path:
    """`src` at `dst` as a hard link when possible (models are large), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
    return dst


def write_adapter(path: Path, tensors: dict[str, np.ndarray], arch: str = "llama",
                  kind: str | None = "adapter", adapter_type: str = "lora") -> Path:
    """A LoRA adapter GGUF with exactly `tensors` (alpha 8); `kind` is general.type (None: unset)."""
    w = gguf.GGUFWriter(path, arch)
    if kind:
        w.add_type(kind)
    w.add_string(gguf.Keys.Adapter.TYPE, adapter_type)
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 8.0)
    for name, array in tensors.items():
        w.add_tensor(name, array)
    return finish(w, path)


# -- byte-level GGUF surgery -----------------------------------------------------------------


def part_pos(field, index: int) -> int:
    """File offset of part `index` of a GGUFReader field."""
    return field.offset + sum(p.nbytes for p in field.parts[:index])


def patched(data: bytes, pos: int, fmt: str, value) -> bytes:
    raw = struct.pack("<" + fmt, value)
    return data[:pos] + raw + data[pos + len(raw):]


def gguf_string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


_FMT = {VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I", VT.INT32: "i",
        VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q", VT.FLOAT64: "d"}


def encode_value(vtype: VT, value, sub: VT | None = None) -> bytes:
    if vtype == VT.STRING:
        return gguf_string(value)
    if vtype == VT.ARRAY:
        return struct.pack("<IQ", sub, len(value)) + b"".join(
            encode_value(sub, v) if sub != VT.ARRAY else v for v in value)
    return struct.pack("<" + _FMT[vtype], value)


def encode_kv(key: str, vtype: VT, value, sub: VT | None = None) -> bytes:
    return gguf_string(key) + struct.pack("<I", vtype) + encode_value(vtype, value, sub)


class Layout:
    """Byte spans of one GGUF file: header, each key/value, tensor infos, tensor data."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        self.reader = r = gguf.GGUFReader(path)
        self.kvs = [(k, f) for k, f in r.fields.items() if not k.startswith("GGUF.")]
        self.tensors = list(r.tensors)
        self.tinfo_start = self.tensors[0].field.offset if self.tensors else r.data_offset
        last = self.tensors[-1].field if self.tensors else None
        self.tinfo_end = part_pos(last, len(last.parts)) if last else r.data_offset
        self.data_offset = r.data_offset
        self.n_tensors, self.n_kv = len(self.tensors), len(self.kvs)

    def kv_span(self, key: str) -> bytes:
        offsets = [f.offset for _, f in self.kvs] + [self.tinfo_start]
        i = [k for k, _ in self.kvs].index(key)
        return self.data[offsets[i]:offsets[i + 1]]

    def rebuild(self, replace: dict[str, bytes | None] | None = None, extra: list[bytes] = (),
                version: int = 3) -> bytes:
        """The file with some key/values replaced (None drops one) or added; data re-aligned."""
        replace = replace or {}
        kvs = [replace.get(k, self.kv_span(k)) for k, _ in self.kvs]
        kvs = [kv for kv in kvs if kv is not None] + list(extra)
        head = b"GGUF" + struct.pack("<IQQ", version, self.n_tensors, len(kvs)) + b"".join(kvs)
        head += self.data[self.tinfo_start:self.tinfo_end]
        head += b"\0" * (-len(head) % 32)
        return head + self.data[self.data_offset:]

    def tensor(self, name: str):
        return next(t for t in self.tensors if t.name == name)
