"""Read the key/value header (and tensor shapes) of a GGUF file without loading it.

Two readers share one bounds-checked cursor:

- `read_header` reads only the requested keys and stops once they are known: config
  validation and ``models_dir`` discovery tell models from LoRA adapters and multimodal
  projectors, and compare architectures, for files that may be many gigabytes.
  ``gguf.GGUFReader`` maps and indexes every tensor; this never touches tensor data.
- `read_metadata` walks the whole header for the checks llamacore runs before llama.cpp opens
  a file (llamacore.gguf.check); it answers None for anything that is not well formed, which
  llama.cpp's own reader then reports.

Pure Python: importing it does not load llama.cpp.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from os import PathLike
from typing import Any

__all__ = ["GGUFHeader", "GGUFMetadata", "ValueType", "read_header", "read_metadata"]

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_KEYS = frozenset({"general.architecture", "general.type"})


class ValueType(IntEnum):
    """gguf_type of gguf.h."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# value type -> struct format of the fixed-size types (all but STRING and ARRAY)
_FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
INT_TYPES = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
_MAX_ARRAY_DEPTH = 8
_SHORT_ARRAY = 4096          # read_metadata keeps the values of integer arrays up to this long


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


@dataclass(frozen=True)
class GGUFMetadata:
    """Every key of a header, its first duplicate vocabulary token and the tensor shapes.

    ``values`` is {key: (value type, value)}; an array's value is (item type, count, items),
    items only for integer arrays of up to 4096 entries (else None). Strings are decoded with
    replacement characters. ``duplicate_token`` is (token bytes, first id, second id) for the
    first token of tokenizer.ggml.tokens that occurs twice, or None. ``tensors`` is {name: ne},
    ``tensor_types`` {name: ggml type id}.
    """

    values: dict[str, tuple[int, Any]]
    duplicate_token: tuple[bytes, int, int] | None
    tensors: dict[str, tuple[int, ...]]
    tensor_types: dict[str, int]


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

    def raw_string(self) -> bytes:
        n = self.unpack("Q")
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return raw

    def string(self) -> str:
        raw = self.raw_string()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"malformed GGUF header: string at offset {self.pos - len(raw)} is not UTF-8") from e

    def value(self, vtype: int) -> Any:
        if vtype == ValueType.STRING:
            return self.string()
        if vtype in _FIXED:
            return self.unpack(_FIXED[vtype])
        raise ValueError(f"malformed GGUF header: unknown value type {vtype} at offset {self.pos - 4}")

    def skip(self, vtype: int, depth: int = 0) -> None:
        if vtype != ValueType.ARRAY:
            self.value(vtype)
            return
        item_type, count = self.unpack("I"), self.unpack("Q")
        if item_type in _FIXED:
            width = struct.calcsize(_FIXED[item_type])
            self.need(count * width)
            self.pos += count * width
        elif item_type == ValueType.STRING:
            self.string_array(count)
        elif item_type == ValueType.ARRAY:
            if depth >= _MAX_ARRAY_DEPTH:    # llama.cpp rejects nested arrays; deep ones would recurse
                raise ValueError(f"malformed GGUF header: arrays nested more than {_MAX_ARRAY_DEPTH} deep")
            for _ in range(count):
                self.skip(ValueType.ARRAY, depth + 1)
        else:
            raise ValueError(f"malformed GGUF header: unknown array item type {item_type}")

    def string_array(self, count: int, seen: dict[bytes, int] | None = None) -> tuple[bytes, int, int] | None:
        """Step over `count` strings (tokenizer vocabularies: the only long loop in a header).

        With `seen` (a dict to fill), the strings are compared as well: the first one that
        occurs twice comes back as (string, first index, second index).
        """
        length, buf, pos, size = struct.Struct(self.endian + "Q"), self.buf, self.pos, self.size
        duplicate = None
        for i in range(count):
            if pos + 8 > size:
                raise ValueError("truncated GGUF header inside a string array")
            n = length.unpack_from(buf, pos)[0]
            pos += 8
            if n > size - pos:
                raise ValueError("truncated GGUF header inside a string array")
            if seen is not None:
                value = buf[pos:pos + n]
                if seen.setdefault(value, i) != i:
                    duplicate, seen = (value, seen[value], i), None
            pos += n
        self.pos = pos
        return duplicate


def _start(buf: mmap.mmap, detect_endian: bool) -> tuple[_Cursor, int, int, int]:
    """A cursor after the counts, and (version, tensor count, key/value count)."""
    cur = _Cursor(buf, "<")
    cur.pos = len(MAGIC)
    version = cur.unpack("I")
    if detect_endian and version & 0xFFFF == 0:   # written on a big-endian machine: reads byte-swapped
        cur.endian = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported GGUF version {version} (supported: {SUPPORTED_VERSIONS})")
    return cur, version, cur.unpack("Q"), cur.unpack("Q")


# -- only the keys asked for -----------------------------------------------------------------


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
    cur, version, tensor_count, kv_count = _start(buf, detect_endian=True)
    if kv_count > cur.size // 12 or tensor_count > cur.size:   # a key/value takes >= 12 bytes
        raise ValueError(f"malformed or truncated GGUF header: {kv_count} keys / {tensor_count} tensors "
                         f"cannot fit in {cur.size} bytes")
    found: dict[str, Any] = {}
    for _ in range(kv_count):
        if wanted <= found.keys():
            break
        key, vtype = cur.string(), cur.unpack("I")
        if key in wanted and vtype != ValueType.ARRAY:
            found[key] = cur.value(vtype)
        else:
            cur.skip(vtype)
    return GGUFHeader(version, tensor_count, kv_count, found)


# -- the whole header ------------------------------------------------------------------------


class _Unparsed(Exception):
    """Not a header read_metadata judges (nested arrays, unknown types): left to llama.cpp."""


def read_metadata(path: str | PathLike[str]) -> GGUFMetadata | None:
    """Every key/value and tensor shape of a little-endian GGUF header; None if it is not well formed.

    The file's magic is not checked (the caller has). OSError when the file cannot be opened.
    """
    with open(path, "rb") as f:
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):      # empty, or not mappable
            return None
    with buf:
        try:
            return _walk(buf)
        except (_Unparsed, ValueError, struct.error):
            return None


def _walk(buf: mmap.mmap) -> GGUFMetadata:
    cur, _, n_tensors, n_kv = _start(buf, detect_endian=False)
    if n_kv > cur.size // 12 or n_tensors > cur.size // 24:    # a tensor's info takes >= 24 bytes
        raise _Unparsed()
    values: dict[str, tuple[int, Any]] = {}
    duplicate = None
    for _ in range(n_kv):
        key = cur.raw_string().decode("utf-8", "replace")
        vtype = cur.unpack("I")
        if vtype in _FIXED:
            values[key] = (vtype, cur.unpack(_FIXED[vtype]))
        elif vtype == ValueType.STRING:
            values[key] = (vtype, cur.raw_string().decode("utf-8", "replace"))
        elif vtype == ValueType.ARRAY:
            seen: dict[bytes, int] | None = {} if key == "tokenizer.ggml.tokens" and duplicate is None else None
            array, duplicate_here = _array(cur, seen)
            values[key] = (vtype, array)
            duplicate = duplicate or duplicate_here
        else:
            raise _Unparsed()
    tensors: dict[str, tuple[int, ...]] = {}
    types: dict[str, int] = {}
    for _ in range(n_tensors):
        name = cur.raw_string().decode("utf-8", "replace")
        n_dims = cur.unpack("I")
        if n_dims > 4:
            raise _Unparsed()
        cur.need(8 * n_dims + 12)
        tensors[name] = struct.unpack_from(f"<{n_dims}Q", cur.buf, cur.pos)
        types[name] = struct.unpack_from("<I", cur.buf, cur.pos + 8 * n_dims)[0]
        cur.pos += 8 * n_dims + 12           # ne[], type, offset
    return GGUFMetadata(values, duplicate, tensors, types)


def _array(cur: _Cursor, seen: dict[bytes, int] | None) -> tuple[tuple[int, int, tuple | None], Any]:
    """(item type, count, items) of an array, and its first duplicate string when `seen` is given."""
    item, count = cur.unpack("I"), cur.unpack("Q")
    if item in _FIXED:
        width = struct.calcsize(_FIXED[item])
        if count > (cur.size - cur.pos) // width:
            raise _Unparsed()
        items = None
        if item in INT_TYPES and count <= _SHORT_ARRAY:
            items = struct.unpack_from(f"<{count}{_FIXED[item]}", cur.buf, cur.pos)
        cur.pos += count * width
        return (item, count, items), None
    if item == ValueType.STRING:     # every string takes >= 8 bytes: the loop ends with the file
        return (item, count, None), cur.string_array(count, seen)
    raise _Unparsed()                # nested arrays or an unknown item type
