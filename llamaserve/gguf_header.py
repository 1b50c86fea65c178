"""Read only the key/value header of a GGUF file.

Config validation and ``models_dir`` discovery must tell models from LoRA adapters and
multimodal projectors, and compare architectures, for files that may be many gigabytes.
``gguf.GGUFReader`` maps and indexes every tensor; this reader walks the header alone, stops
as soon as the requested keys are known and never touches tensor data.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

__all__ = ["GGUFHeader", "read_header"]

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_KEYS = frozenset({"general.architecture", "general.type"})

# GGUF value type id -> struct format of the fixed-size types; 8 is STRING and 9 is ARRAY.
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_MAX_ARRAY_DEPTH = 8


@dataclass(frozen=True)
class GGUFHeader:
    """The header counts plus those requested keys that were found (arrays are never kept)."""

    version: int
    tensor_count: int
    kv_count: int
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    @property
    def type(self) -> str | None:
        """``general.type``: "model", "adapter", "mmproj", ... (older files leave it out)."""
        return self.metadata.get("general.type")


class _Cursor:
    """Bounds-checked reads from the mapped file; every overrun becomes a ValueError."""

    def __init__(self, buf: mmap.mmap, endian: str) -> None:
        self.buf, self.pos, self.size, self.endian = buf, 0, len(buf), endian

    def unpack(self, fmt: str) -> Any:
        width = struct.calcsize(fmt)
        self.need(width)
        (value,) = struct.unpack_from(self.endian + fmt, self.buf, self.pos)
        self.pos += width
        return value

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise ValueError(f"truncated GGUF header: {n} bytes needed at offset {self.pos} of {self.size}")

    def string(self) -> str:
        n = self.unpack("Q")
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"malformed GGUF header: string at offset {self.pos - n} is not UTF-8") from e

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype in _FIXED:
            return self.unpack(_FIXED[vtype])
        raise ValueError(f"malformed GGUF header: unknown value type {vtype} at offset {self.pos - 4}")

    def skip(self, vtype: int, depth: int = 0) -> None:
        if vtype != _ARRAY:
            self.value(vtype)
            return
        item_type, count = self.unpack("I"), self.unpack("Q")
        if item_type in _FIXED:
            width = struct.calcsize(_FIXED[item_type])
            self.need(count * width)
            self.pos += count * width
        elif item_type == _STRING:   # tokenizer vocabularies: the only long loop in a header
            length, buf, pos, size = struct.Struct(self.endian + "Q"), self.buf, self.pos, self.size
            for _ in range(count):
                if pos + 8 > size:
                    raise ValueError("truncated GGUF header inside a string array")
                pos += 8 + length.unpack_from(buf, pos)[0]
            self.pos = pos
            self.need(0)
        elif item_type == _ARRAY:
            if depth >= _MAX_ARRAY_DEPTH:    # llama.cpp rejects nested arrays; deep ones would recurse
                raise ValueError(f"malformed GGUF header: arrays nested more than {_MAX_ARRAY_DEPTH} deep")
            for _ in range(count):
                self.skip(_ARRAY, depth + 1)
        else:
            raise ValueError(f"malformed GGUF header: unknown array item type {item_type}")


def read_header(path: str | PathLike[str], keys: Collection[str] = DEFAULT_KEYS) -> GGUFHeader:
    """Parse the header of the GGUF file at ``path`` up to the last of ``keys``.

    Raises ValueError for anything that is not a well-formed GGUF header (bad magic, unknown
    version or value type, counts or lengths that run past the end of the file) and OSError
    when the file cannot be read.
    """
    with open(path, "rb") as f:
        magic = f.read(4)
        if magic != MAGIC:
            raise ValueError(f"not a GGUF file (bad magic {magic!r})")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, frozenset(keys))


def _parse(buf: mmap.mmap, wanted: frozenset[str]) -> GGUFHeader:
    cur = _Cursor(buf, "<")
    cur.pos = len(MAGIC)
    version = cur.unpack("I")
    if version & 0xFFFF == 0:   # written on a big-endian machine: the version reads byte-swapped
        cur.endian = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported GGUF version {version} (supported: {SUPPORTED_VERSIONS})")
    tensor_count, kv_count = cur.unpack("Q"), cur.unpack("Q")
    if kv_count > cur.size // 12 or tensor_count > cur.size:   # a key/value takes >= 12 bytes
        raise ValueError(f"malformed or truncated GGUF header: {kv_count} keys / {tensor_count} tensors "
                         f"cannot fit in {cur.size} bytes")
    found: dict[str, Any] = {}
    for _ in range(kv_count):
        if wanted <= found.keys():
            break
        key, vtype = cur.string(), cur.unpack("I")
        if key in wanted and vtype != _ARRAY:
            found[key] = cur.value(vtype)
        else:
            cur.skip(vtype)
    return GGUFHeader(version, tensor_count, kv_count, found)
