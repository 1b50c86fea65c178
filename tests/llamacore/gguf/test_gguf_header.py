"""llamacore.gguf.header: header-only GGUF parsing, checked against gguf's own writer and reader."""

from __future__ import annotations

import struct

import gguf
import pytest
from gguf_files import fake_gguf

from llamacore.gguf.header import ValueType, read_header, read_metadata


def test_header_of_real_model_and_adapter(tiny_model_path, lora_other_arch_path):
    model = read_header(tiny_model_path)
    assert (model.version, model.architecture, model.type) == (3, "llama", None)
    assert model.tensor_count == len(gguf.GGUFReader(tiny_model_path).tensors)
    adapter = read_header(lora_other_arch_path)
    assert (adapter.architecture, adapter.type) == ("gpt2", "adapter")


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_header_skips_every_value_type(tmp_path, endian):
    path = fake_gguf(tmp_path / "f.gguf", kind="mmproj", endian=endian, every_type=True)
    keys = {"general.type", "test.u8", "test.i64", "test.f64", "test.flag", "test.nested"}
    header = read_header(path, keys)
    assert dict(header.metadata) == {"general.type": "mmproj", "test.u8": 7, "test.i64": -5,
                                     "test.f64": 2.5, "test.flag": True}   # arrays are skipped, not kept
    assert (header.kv_count, header.tensor_count) == (9, 0)


def test_header_stops_once_the_keys_are_known(tmp_path):
    w = gguf.GGUFWriter(tmp_path / "t.gguf", "llama")
    w.add_type("model")
    w.add_array("big", list(range(1000)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    data = (tmp_path / "t.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:len(data) - 2000])   # the array runs past the end of the file
    assert read_header(cut).type == "model"
    with pytest.raises(ValueError, match="truncated"):
        read_header(cut, {"general.type", "not.there"})


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b"", "bad magic"),
    (lambda b: b"GGML" + b[4:], "bad magic"),
    (lambda b: b[:4], "truncated"),
    (lambda b: b[:30], "truncated"),
    (lambda b: b[:4] + struct.pack("<I", 99) + b[8:], "unsupported GGUF version 99"),
    (lambda b: b[:16] + struct.pack("<Q", 2**40) + b[24:], "cannot fit"),
])
def test_malformed_headers_raise_value_error(tmp_path, mutate, message):
    good = fake_gguf(tmp_path / "good.gguf", every_type=True).read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(mutate(good))
    with pytest.raises(ValueError, match=message):
        read_header(bad, {"never.found"})


def test_unknown_value_type_raises(tmp_path):
    key = b"general.architecture"
    raw = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<I", 42)
    path = tmp_path / "weird.gguf"
    path.write_bytes(raw + b"\0" * 16)
    with pytest.raises(ValueError, match="unknown value type 42"):
        read_header(path)


def test_metadata_of_real_model(tiny_model_path):
    meta = read_metadata(tiny_model_path)
    reader = gguf.GGUFReader(tiny_model_path)
    assert meta is not None and meta.duplicate_token is None
    assert meta.values["general.architecture"] == (ValueType.STRING, "llama")
    item, count, items = meta.values["tokenizer.ggml.tokens"][1]
    assert (item, count, items) == (ValueType.STRING, len(reader.fields["tokenizer.ggml.tokens"].data), None)
    assert meta.tensors == {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}


def test_metadata_finds_a_duplicate_token(tmp_path):
    w = gguf.GGUFWriter(tmp_path / "d.gguf", "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c", "b"])
    w.add_array("test.ints", [1, 2, 3])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    meta = read_metadata(tmp_path / "d.gguf")
    assert meta.duplicate_token == (b"b", 1, 3)
    assert meta.values["test.ints"] == (ValueType.ARRAY, (ValueType.INT32, 3, (1, 2, 3)))


def test_metadata_leaves_what_it_cannot_judge_to_llama_cpp(tmp_path):
    for name, kwargs in (("big.gguf", {"endian": gguf.GGUFEndian.BIG}), ("nested.gguf", {"every_type": True})):
        assert read_metadata(fake_gguf(tmp_path / name, **kwargs)) is None
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "short.gguf").write_bytes(b"GGUF\x03\0\0\0")
    assert read_metadata(tmp_path / "empty.gguf") is None and read_metadata(tmp_path / "short.gguf") is None


def test_a_checked_file_is_not_read_again_until_it_changes(tmp_path, monkeypatch):
    """check_gguf_file remembers files that passed; replacing one with a bad file is checked again."""
    from llamacore.gguf import check as gguf_check
    from llamacore.gguf.check import check_gguf_file

    def write(tokens):
        w = gguf.GGUFWriter(tmp_path / "v.gguf", "llama")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()

    write(["a", "b", "c"])
    path = str(tmp_path / "v.gguf")
    assert check_gguf_file(path, "model") == path
    reads = []
    real = gguf_check._check
    monkeypatch.setattr(gguf_check, "_check", lambda *a: reads.append(a) or real(*a))
    assert check_gguf_file(path, "model") == path and reads == []      # not read again
    write(["a", "b", "c", "b"])                    # same path, new content: checked again and refused
    with pytest.raises(ValueError, match="twice"):
        check_gguf_file(path, "model")
    assert len(reads) == 1
