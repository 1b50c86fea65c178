"""Corrupt GGUF models and LoRA adapters: loading must raise a Python exception, never abort.

The corpus is made in the test from the tiny model and a LoRA adapter: bad magic and versions,
truncations at many offsets, patched counts, tensor offsets, dimensions and types in the
tensor-info section, metadata of the wrong type, bad tokenizers, unknown architectures and
adapters that do not fit the model. Each file is loaded through llamacore.Model / LoraAdapter
in a child interpreter (an abort or segfault there is a negative return code, not a dead pytest),
and then a few of them through a real server next to a good model.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest
from helpers import REPO_ROOT
from isolation import run_python as run_isolated
from server import ServerProcess

ALLOWED = ("FileNotFoundError", "ValueError", "OSError", "IsADirectoryError", "PermissionError")
VT = gguf.GGUFValueType


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


def model_corpus(model: Path, out: Path) -> dict[str, Path]:
    """name -> corrupt copy of the tiny model."""
    lay = Layout(model)
    d = lay.data
    files: dict[str, bytes] = {}
    files["empty"] = b""
    files["bad-magic"] = b"GGML" + d[4:]
    files["lowercase-magic"] = b"gguf" + d[4:]
    for v in (0, 1, 4, 99999, 0xFFFFFFFF):
        files[f"version-{v}"] = patched(d, 4, "I", v)
    tokens = dict(lay.kvs)["tokenizer.ggml.tokens"]
    vocab = [bytes(tokens.parts[i]) for i in tokens.data]
    cuts = {"magic": 4, "version": 6, "counts": 20, "first-key": 30, "tokens-array": tokens.offset + 5000,
            "kv-end": lay.tinfo_start - 1, "tinfo-start": lay.tinfo_start, "tinfo-mid": lay.tinfo_start + 30,
            "padding": lay.tinfo_end + 1, "data-start": lay.data_offset, "data-4k": lay.data_offset + 4096,
            "half": len(d) // 2, "last-byte": len(d) - 1}
    for name, at in cuts.items():
        files[f"truncated-{name}"] = d[:at]
    for count, label in ((2**62, "2^62"), (2**31, "2^31"), (lay.n_tensors + 1, "plus1"), (0, "0")):
        files[f"tensor-count-{label}"] = patched(d, 8, "Q", count)
    for count, label in ((2**62, "2^62"), (2**31, "2^31"), (lay.n_kv + 1, "plus1"), (0, "0")):
        files[f"kv-count-{label}"] = patched(d, 16, "Q", count)

    emb = lay.tensor("token_embd.weight").field     # parts: name len, name, n_dims, ne[], type, offset
    last = max(lay.tensors, key=lambda t: t.data_offset)
    files["tensor-offset-2^62"] = patched(d, part_pos(emb, 5), "Q", 2**62)
    files["tensor-offset-filesize"] = patched(d, part_pos(emb, 5), "Q", len(d))
    files["tensor-offset-misaligned"] = patched(d, part_pos(emb, 5), "Q", 1)
    files["tensor-data-past-end"] = patched(d, part_pos(last.field, 5), "Q",
                                            int(last.field.parts[5][0]) + 32)
    files["tensor-ne0-2^62"] = patched(d, part_pos(emb, 3), "Q", 2**62)
    files["tensor-ne1-0"] = patched(d, part_pos(emb, 3) + 8, "Q", 0)
    files["tensor-ne1-2^40"] = patched(d, part_pos(emb, 3) + 8, "Q", 2**40)
    files["tensor-ne-overflow"] = patched(patched(d, part_pos(emb, 3), "Q", 2**32), part_pos(emb, 3) + 8, "Q", 2**32)
    files["tensor-ne0-negative"] = patched(d, part_pos(emb, 3), "q", -64)
    files["tensor-ndims-5"] = patched(d, part_pos(emb, 2), "I", 5)
    files["tensor-ndims-2^31"] = patched(d, part_pos(emb, 2), "I", 2**31)
    files["tensor-type-9999"] = patched(d, part_pos(emb, 4), "I", 9999)
    files["tensor-type-q4k-misfit"] = patched(d, part_pos(emb, 4), "I", int(gguf.GGMLQuantizationType.Q4_K))
    files["tensor-name-length-2^62"] = patched(d, part_pos(emb, 0), "Q", 2**62)
    blk1 = lay.tensor("blk.1.attn_norm.weight").field
    files["tensor-name-duplicate"] = patched(d, part_pos(blk1, 1) + 4, "B", ord("0"))
    arch = dict(lay.kvs)["general.architecture"]
    files["key-length-2^62"] = patched(d, part_pos(arch, 0), "Q", 2**62)
    files["value-type-99"] = patched(d, part_pos(arch, 2), "I", 99)
    files["string-length-2^62"] = patched(d, part_pos(arch, 3), "Q", 2**62)
    files["tokens-count-2^62"] = patched(d, part_pos(tokens, 4), "Q", 2**62)
    files["tokens-item-type-99"] = patched(d, part_pos(tokens, 3), "I", 99)

    # metadata rewritten with a wrong type, a bad value or missing
    kv = lambda key, vt, value, sub=None: encode_kv(key, vt, value, sub)
    edits = {
        "ctx-len-string": {"llama.context_length": kv("llama.context_length", VT.STRING, "2048")},
        "arch-int": {"general.architecture": kv("general.architecture", VT.UINT32, 7)},
        "arch-unknown": {"general.architecture": kv("general.architecture", VT.STRING, "nosucharch")},
        "arch-empty": {"general.architecture": kv("general.architecture", VT.STRING, "")},
        "arch-missing": {"general.architecture": None},
        "block-count-missing": {"llama.block_count": None},
        "block-count-huge": {"llama.block_count": kv("llama.block_count", VT.UINT32, 0xFFFFFFFF)},
        "block-count-3": {"llama.block_count": kv("llama.block_count", VT.UINT32, 3)},
        "block-count-0": {"llama.block_count": kv("llama.block_count", VT.UINT32, 0)},
        "head-count-0": {"llama.attention.head_count": kv("llama.attention.head_count", VT.UINT32, 0)},
        "head-count-kv-3": {"llama.attention.head_count_kv": kv("llama.attention.head_count_kv", VT.UINT32, 3)},
        "head-count-kv-0": {"llama.attention.head_count_kv": kv("llama.attention.head_count_kv", VT.UINT32, 0)},
        "embd-length-0": {"llama.embedding_length": kv("llama.embedding_length", VT.UINT32, 0)},
        "embd-length-128": {"llama.embedding_length": kv("llama.embedding_length", VT.UINT32, 128)},
        "ff-length-0": {"llama.feed_forward_length": kv("llama.feed_forward_length", VT.UINT32, 0)},
        "rope-dims-2^31": {"llama.rope.dimension_count": kv("llama.rope.dimension_count", VT.UINT32, 2**31)},
        "tokens-missing": {"tokenizer.ggml.tokens": None},
        "tokenizer-unknown": {"tokenizer.ggml.model": kv("tokenizer.ggml.model", VT.STRING, "nosuch")},
        "tokenizer-gpt2-no-merges": {"tokenizer.ggml.model": kv("tokenizer.ggml.model", VT.STRING, "gpt2")},
        "tokens-int-array": {"tokenizer.ggml.tokens": kv("tokenizer.ggml.tokens", VT.ARRAY, [1, 2, 3], VT.INT32)},
        "tokens-short": {"tokenizer.ggml.tokens": kv("tokenizer.ggml.tokens", VT.ARRAY,
                                                     [f"t{i}" for i in range(100)], VT.STRING)},
        "tokens-duplicates": {"tokenizer.ggml.tokens": kv("tokenizer.ggml.tokens", VT.ARRAY,
                                                          ["same"] * 32000, VT.STRING)},
        "scores-short": {"tokenizer.ggml.scores": kv("tokenizer.ggml.scores", VT.ARRAY, [0.0] * 10, VT.FLOAT32)},
        "tokens-one-duplicate": {"tokenizer.ggml.tokens": kv("tokenizer.ggml.tokens", VT.ARRAY,
                                                             vocab[:1001] + [vocab[1000]] + vocab[1002:],
                                                             VT.STRING)},
        "bos-out-of-range": {"tokenizer.ggml.bos_token_id": kv("tokenizer.ggml.bos_token_id", VT.UINT32, 10**6)},
        "nextn-layers-3": {}, "experts-2000": {}, "experts-used-over-count": {}, "experts-without-used": {},
        "rope-scaling-bogus": {},
        "alignment-0": {}, "alignment-3": {}, "alignment-u64": {},
        "nested-array": {},
        "chat-template-int": {"tokenizer.chat_template": kv("tokenizer.chat_template", VT.UINT32, 5)},
    }
    extras = {
        "nextn-layers-3": [kv("llama.nextn_predict_layers", VT.UINT32, 3)],
        "experts-2000": [kv("llama.expert_count", VT.UINT32, 2000), kv("llama.expert_used_count", VT.UINT32, 2)],
        "experts-used-over-count": [kv("llama.expert_count", VT.UINT32, 4),
                                    kv("llama.expert_used_count", VT.UINT32, 8)],
        "experts-without-used": [kv("llama.expert_count", VT.UINT32, 4)],
        "rope-scaling-bogus": [kv("llama.rope.scaling.type", VT.STRING, "bogus")],
        "alignment-0": [kv("general.alignment", VT.UINT32, 0)],
        "alignment-3": [kv("general.alignment", VT.UINT32, 3)],
        "alignment-u64": [kv("general.alignment", VT.UINT64, 32)],
        "nested-array": [kv("x.nested", VT.ARRAY, [encode_value(VT.ARRAY, [1, 2], VT.UINT8)] * 3, VT.ARRAY)],
    }
    for name, replace in edits.items():
        files[f"kv-{name}"] = lay.rebuild(replace, extras.get(name, []))
    files["rebuilt-version-2"] = lay.rebuild(version=2)    # v2 layout is v3's: must load (sanity check)

    paths = {}
    for name, content in files.items():
        path = out / f"{name}.gguf"
        path.write_bytes(content)
        paths[name] = path
    return paths


def write_adapter(path: Path, tensors: dict[str, np.ndarray], arch: str = "llama",
                  kind: str | None = "adapter", adapter_type: str = "lora") -> Path:
    w = gguf.GGUFWriter(path, arch)
    if kind:
        w.add_type(kind)
    w.add_string(gguf.Keys.Adapter.TYPE, adapter_type)
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 8.0)
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def adapter_corpus(lora: Path, base: Path, other_arch: Path, wrong_shape: Path, out: Path) -> dict[str, Path]:
    """name -> adapter file that must not load onto the tiny model."""
    lay = Layout(lora)
    d = lay.data
    paths = {"other-arch": other_arch, "wrong-shape": wrong_shape, "base-model": base}
    files = {"bad-magic": b"GGML" + d[4:], "version-99999": patched(d, 4, "I", 99999),
             "truncated-half": d[: len(d) // 2], "truncated-header": d[:40],
             "tensor-count-2^62": patched(d, 8, "Q", 2**62)}
    first = lay.tensors[0].field
    files["tensor-offset-2^62"] = patched(d, part_pos(first, 5), "Q", 2**62)
    files["tensor-ne0-2^62"] = patched(d, part_pos(first, 3), "Q", 2**62)
    files["type-missing"] = lay.rebuild({"general.type": None})
    files["type-model"] = lay.rebuild({"general.type": encode_kv("general.type", VT.STRING, "model")})
    files["adapter-type-unknown"] = lay.rebuild({"adapter.type": encode_kv("adapter.type", VT.STRING, "nosuch")})
    files["arch-int"] = lay.rebuild({"general.architecture": encode_kv("general.architecture", VT.UINT32, 1)})
    files["type-int"] = lay.rebuild({"general.type": encode_kv("general.type", VT.INT32, 1)})
    files["adapter-type-int"] = lay.rebuild({"adapter.type": encode_kv("adapter.type", VT.UINT8, 1)})
    files["alpha-string"] = lay.rebuild({"adapter.lora.alpha": encode_kv("adapter.lora.alpha", VT.STRING, "8")})
    files["alpha-f64"] = lay.rebuild({"adapter.lora.alpha": encode_kv("adapter.lora.alpha", VT.FLOAT64, 8.0)})
    for name, content in files.items():
        paths[name] = out / f"lora-{name}.gguf"
        paths[name].write_bytes(content)

    rng = np.random.default_rng(0)
    a = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    q = "blk.0.attn_q.weight"
    paths["only-lora-a"] = write_adapter(out / "lora-only-a.gguf", {f"{q}.lora_a": a(4, 64)})
    paths["rank-mismatch"] = write_adapter(out / "lora-rank-mismatch.gguf",
                                           {f"{q}.lora_a": a(4, 64), f"{q}.lora_b": a(64, 8)})
    paths["transposed"] = write_adapter(out / "lora-transposed.gguf",
                                        {f"{q}.lora_a": a(64, 4), f"{q}.lora_b": a(4, 64)})
    paths["unknown-layer"] = write_adapter(out / "lora-unknown-layer.gguf",
                                           {"blk.7.attn_q.weight.lora_a": a(4, 64),
                                            "blk.7.attn_q.weight.lora_b": a(64, 4)})
    paths["3d-tensors"] = write_adapter(out / "lora-3d.gguf",
                                        {f"{q}.lora_a": a(2, 4, 64), f"{q}.lora_b": a(2, 64, 4)})
    return paths


# -- loading in a child ----------------------------------------------------------------------

CHILD = r"""
import json, sys
import llamacore
from llamacore import Batch, Context, Sampler

def smoke(model, adapter=None):
    # a file that loads must also work: tokenize, decode (with the adapter) and sample
    model.metadata, model.chat_template(), model.desc
    ctx = Context(model, n_ctx=64, n_batch=64, n_threads=1)
    if adapter is not None:
        ctx.set_adapters({adapter: 1.0})
    tokens = model.tokenize("Hello world")
    batch = Batch(64)
    batch.add_sequence(tokens, 0, 0, logits_last=True)
    ctx.decode(batch)
    token = Sampler().greedy().sample(ctx, batch.n_tokens - 1)
    model.token_to_piece(token)

cases = json.loads(sys.argv[1])
base = None
for name, kind, path in cases:
    print(json.dumps({"begin": name}), flush=True)
    try:
        if kind == "model":
            model, adapter = llamacore.Model(path), None
        else:
            if base is None:
                base = llamacore.Model(sys.argv[2])
            model, adapter = base, llamacore.LoraAdapter(base, path)
    except Exception as e:
        result = {"name": name, "exc": type(e).__name__, "msg": str(e)[:300]}
    else:
        try:
            smoke(model, adapter)
            result = {"name": name, "loaded": True, "smoke": "ok"}
        except Exception as e:
            result = {"name": name, "loaded": True, "smoke": f"{type(e).__name__}: {str(e)[:200]}"}
        del model, adapter
    print(json.dumps(result), flush=True)
"""


def load_all(cases: list[tuple[str, str, str]], base: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """Load every case in children; a child that dies is restarted after the case that killed it.

    Returns (results by name, crashes by name -> description).
    """
    results, crashes, todo = {}, {}, list(cases)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "GGML_NO_BACKTRACE": "1", "OMP_NUM_THREADS": "1"}
    for _ in range(len(cases) + 1):          # bounded: each round finishes at least one case
        if not todo:
            break
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(todo), str(base)], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=300, check=False)
        current = None
        for line in proc.stdout.splitlines():
            msg = json.loads(line)
            if "begin" in msg:
                current = msg["begin"]
            else:
                results[msg["name"]] = msg
                current = None
        done = {n for n, _, _ in todo if n in results}
        if current is not None:
            crashes[current] = f"child died with {proc.returncode}: {proc.stderr[-800:]}"
            done.add(current)
        elif proc.returncode != 0:
            pytest.fail(f"child failed outside a case ({proc.returncode}): {proc.stderr[-2000:]}")
        todo = [c for c in todo if c[0] not in done]
    return results, crashes


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_model_path, lora_a_path, lora_other_arch_path, lora_wrong_shape_path):
    out = tmp_path_factory.mktemp("corrupt")
    models = model_corpus(tiny_model_path, out)
    adapters = adapter_corpus(lora_a_path, tiny_model_path, lora_other_arch_path, lora_wrong_shape_path, out)
    yield models, adapters
    shutil.rmtree(out, ignore_errors=True)


# Odd but not broken: llama.cpp may accept these; then using them must work or raise, never abort.
MAY_LOAD = {"rebuilt-version-2", "kv-bos-out-of-range", "kv-chat-template-int"}


def test_corrupt_files_raise_python_errors(corpus, tiny_model_path):
    models, adapters = corpus
    cases = [(n, "model", str(p)) for n, p in models.items()]
    cases += [(n, "adapter", str(p)) for n, p in adapters.items()]
    results, crashes = load_all(cases, tiny_model_path)
    print(f"{len(cases)} corrupt files tried ({len(models)} models, {len(adapters)} adapters)")
    assert not crashes, "llama.cpp killed the process:\n" + "\n".join(f"{n}: {c}" for n, c in crashes.items())
    assert results["rebuilt-version-2"] == {"name": "rebuilt-version-2", "loaded": True, "smoke": "ok"}  # sound surgery
    loaded = [n for n, r in results.items() if r.get("loaded") and n not in MAY_LOAD]
    assert not loaded, f"corrupt files loaded without an error: {loaded}"
    wrong = {n: r for n, r in results.items() if not r.get("loaded") and r.get("exc") not in ALLOWED}
    assert not wrong, f"unexpected exception types: {wrong}"
    assert all(r["msg"] for r in results.values() if "exc" in r)


def test_directory_and_missing_paths(tmp_path, tiny_model_path):
    proc = run_isolated(f"""
        import llamacore
        for path in [{str(tmp_path)!r}, {str(tmp_path / "missing.gguf")!r}]:
            try:
                llamacore.Model(path)
            except OSError as e:
                print(type(e).__name__)
            m = llamacore.Model({str(tiny_model_path)!r})
            try:
                llamacore.LoraAdapter(m, path)
            except OSError as e:
                print(type(e).__name__)
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["IsADirectoryError"] * 2 + ["FileNotFoundError"] * 2


# -- through the server ----------------------------------------------------------------------

# header intact (config validation reads general.architecture / general.type only), body broken
# (the last two made llama.cpp abort, which took the whole server down, before model.pyx checked them)
SERVED = ["truncated-data-4k", "tensor-offset-2^62", "tensor-ne0-2^62", "kv-arch-unknown", "kv-ctx-len-string",
          "kv-block-count-0", "kv-tokens-one-duplicate"]


def test_server_reports_corrupt_models_and_keeps_serving(corpus, tmp_path, tiny_model_path, lora_wrong_shape_path):
    models, adapters = corpus
    config = {
        "idle_unload": 600, "parallel": 2, "max_queue": 4,
        "defaults": {"n_ctx": 128, "n_threads": 1},
        "models": [{"alias": "good", "model": str(tiny_model_path)},
                   # other load options: not a sibling of "good" (siblings share one base and its adapters)
                   {"alias": "bad-lora", "model": str(tiny_model_path), "n_ctx": 96,
                    "lora_adapters": {str(adapters["transposed"]): 1.0}}]
                  + [{"alias": name, "model": str(models[name])} for name in SERVED],
    }
    server = ServerProcess(config, tmp_path).start()
    try:
        def good():
            r = httpx.post(server.base_url + "/v1/completions", timeout=60,
                           json={"model": "good", "prompt": "Hi", "max_tokens": 2, "temperature": 0})
            assert r.status_code == 200, r.text
        good()
        for alias in [*SERVED, "bad-lora"]:
            for route, body in [("/v1/completions", {"prompt": "x", "max_tokens": 1}),
                                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                          "max_tokens": 1})]:
                r = httpx.post(server.base_url + route, json={"model": alias, **body}, timeout=60)
                assert r.status_code == 500, (alias, r.status_code, r.text)
                err = r.json()["error"]
                assert set(err) == {"message", "type", "param", "code"}, err
                assert err["code"] == "model_load_failed" and err["type"] == "server_error", err
                assert f"model '{alias}' failed to load" in err["message"], err
                assert "Traceback" not in err["message"], err
                assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
            good()
        assert server.proc.poll() is None
    finally:
        rc = server.stop()
    assert rc == 0, server.log()


def test_config_rejects_unreadable_headers(corpus, tmp_path):
    """Files whose header itself is broken fail config validation (with the file named), not startup."""
    from llamaserve.config import ConfigError, load_config

    models, _ = corpus
    names = ["version-99999", "empty", "bad-magic", "truncated-counts", "kv-count-2^62", "string-length-2^62"]
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"models": [{"alias": n, "model": str(models[n])} for n in names]}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    problems = info.value.problems
    assert len(problems) == len(names), problems
    for name, line in zip(names, problems):
        assert line.startswith(f"{path}: ") and f"{name}.gguf" in line, line
