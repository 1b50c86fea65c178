"""Corrupt GGUF models and LoRA adapters: loading must raise a Python exception, never abort.

The corpus is made in the test from the tiny model and a LoRA adapter: bad magic and versions,
truncations at many offsets, patched counts, tensor offsets, dimensions and types in the
tensor-info section, metadata of the wrong type, bad tokenizers, unknown architectures and
adapters that do not fit the model. Each file is loaded through llamacore.Model / LoraAdapter
in a child interpreter (isolation.run_cases: a file that makes llama.cpp abort fails as that
file, and a new child loads the rest), and then a few of them through a real server next to a
good model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import httpx
import numpy as np
import pytest
from gguf_files import VT, Layout, encode_kv, encode_value, part_pos, patched, write_adapter
from helpers import assert_openai_error, describe
from isolation import run_cases, run_python
from server import ServerProcess

ALLOWED = ("FileNotFoundError", "ValueError", "OSError", "IsADirectoryError", "PermissionError")


# -- the corpus ------------------------------------------------------------------------------


def structural_corpus(lay: Layout) -> dict[str, bytes]:
    """name -> the tiny model with its header, counts or tensor infos broken, or truncated."""
    d = lay.data
    files: dict[str, bytes] = {}
    files["empty"] = b""
    files["bad-magic"] = b"GGML" + d[4:]
    files["lowercase-magic"] = b"gguf" + d[4:]
    for v in (0, 1, 4, 99999, 0xFFFFFFFF):
        files[f"version-{v}"] = patched(d, 4, "I", v)
    tokens = dict(lay.kvs)["tokenizer.ggml.tokens"]
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
    return files


def metadata_corpus(lay: Layout) -> dict[str, bytes]:
    """name -> the tiny model with metadata of a wrong type, a bad value or missing."""
    files: dict[str, bytes] = {}
    tokens = dict(lay.kvs)["tokenizer.ggml.tokens"]
    vocab = [bytes(tokens.parts[i]) for i in tokens.data]

    def kv(key, vt, value, sub=None):
        return encode_kv(key, vt, value, sub)

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
    return files


def write_files(files: dict[str, bytes], out: Path, prefix: str = "") -> dict[str, Path]:
    paths = {}
    for name, content in files.items():
        paths[name] = out / f"{prefix}{name}.gguf"
        paths[name].write_bytes(content)
    return paths


def model_corpus(model: Path, out: Path) -> dict[str, Path]:
    """name -> corrupt copy of the tiny model."""
    lay = Layout(model)
    return write_files({**structural_corpus(lay), **metadata_corpus(lay)}, out)


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
    paths.update(write_files(files, out, prefix="lora-"))

    rng = np.random.default_rng(0)

    def a(*shape):
        return rng.standard_normal(shape).astype(np.float32)

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

LOAD_SETUP = """
import llamacore
from llamacore import Batch, Context, Sampler

BASE = None

def load(kind, path):
    # raises when the file is rejected (the outcome's exception)
    global BASE
    if kind == "model":
        return llamacore.Model(path), None
    if BASE is None:
        BASE = llamacore.Model({base!r})
    return BASE, llamacore.LoraAdapter(BASE, path)

def smoke(model, adapter=None):
    # a file that loads must also work: tokenize, decode (with the adapter) and sample
    try:
        model.metadata, model.chat_template(), model.desc
        ctx = Context(model, n_ctx=64, n_batch=64, n_threads=1)
        if adapter is not None:
            ctx.set_adapters({{adapter: 1.0}})
        tokens = model.tokenize("Hello world")
        batch = Batch(64)
        batch.add_sequence(tokens, 0, 0, logits_last=True)
        ctx.decode(batch)
        token = Sampler().greedy().sample(ctx, batch.n_tokens - 1)
        model.token_to_piece(token)
    except Exception as e:
        return f"{{type(e).__name__}}: {{str(e)[:200]}}"
    return "ok"
"""


def load_all(kind: str, paths: dict[str, Path], base: Path):
    """Load every file in children; an outcome's value is the smoke result of a file that loaded."""
    cases = {name: f"model, adapter = load({kind!r}, {str(path)!r})\nreturn smoke(model, adapter)"
             for name, path in paths.items()}
    run = run_cases(LOAD_SETUP.format(base=str(base)), cases)
    assert not run.crashes(), "llama.cpp killed the process:\n" + "\n".join(
        f"{n}: {c}" for n, c in run.crashes().items())
    assert not run.stray, run.stray
    return run.outcomes


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tiny_model_path, lora_a_path, lora_other_arch_path, lora_wrong_shape_path):
    out = tmp_path_factory.mktemp("corrupt")
    models = model_corpus(tiny_model_path, out)
    adapters = adapter_corpus(lora_a_path, tiny_model_path, lora_other_arch_path, lora_wrong_shape_path, out)
    yield models, adapters
    shutil.rmtree(out, ignore_errors=True)


# Odd but not broken: llama.cpp may accept these; then using them must work or raise, never abort.
MAY_LOAD = {"rebuilt-version-2", "kv-bos-out-of-range", "kv-chat-template-int"}


def check_rejected(outcomes) -> None:
    loaded = [n for n, o in outcomes.items() if o.exc is None and n not in MAY_LOAD]
    assert not loaded, f"corrupt files loaded without an error: {loaded}"
    wrong = {n: str(o) for n, o in outcomes.items() if o.exc is not None and o.exc not in ALLOWED}
    assert not wrong, f"unexpected exception types: {wrong}"
    assert all(o.msg for o in outcomes.values() if o.exc is not None)


def test_corrupt_models_raise_python_errors(corpus, tiny_model_path):
    models, _ = corpus
    outcomes = load_all("model", models, tiny_model_path)
    print(f"{len(models)} corrupt models tried")
    sound = outcomes["rebuilt-version-2"]
    assert (sound.exc, sound.value) == (None, "ok"), sound     # the surgery itself is sound
    check_rejected(outcomes)


def test_corrupt_adapters_raise_python_errors(corpus, tiny_model_path):
    _, adapters = corpus
    outcomes = load_all("adapter", adapters, tiny_model_path)
    print(f"{len(adapters)} corrupt adapters tried")
    check_rejected(outcomes)


def test_directory_and_missing_paths(tmp_path, tiny_model_path):
    proc = run_python(f"""
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
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.split() == ["IsADirectoryError"] * 2 + ["FileNotFoundError"] * 2


# -- through the server ----------------------------------------------------------------------

# header intact (config validation reads general.architecture / general.type only), body broken
# (the last two made llama.cpp abort, which took the whole server down, before model.pyx checked them)
SERVED = ["truncated-data-4k", "tensor-offset-2^62", "tensor-ne0-2^62", "kv-arch-unknown", "kv-ctx-len-string",
          "kv-block-count-0", "kv-tokens-one-duplicate"]


@pytest.mark.server
@pytest.mark.slow
def test_server_reports_corrupt_models_and_keeps_serving(corpus, tmp_path, tiny_model_path, lora_wrong_shape_path):
    models, _ = corpus
    config = {
        "idle_unload": 600, "parallel": 2, "max_queue": 4,
        "defaults": {"n_ctx": 128, "n_threads": 1},
        "models": [{"alias": "good", "model": str(tiny_model_path)}]
                  + [{"alias": name, "model": str(models[name])} for name in SERVED],
    }
    server = ServerProcess(config, tmp_path).start()
    try:
        def good():
            r = httpx.post(server.base_url + "/v1/completions", timeout=60,
                           json={"model": "good", "prompt": "Hi", "max_tokens": 2, "temperature": 0})
            assert r.status_code == 200, r.text
        good()
        for alias in SERVED:
            for route, body in [("/v1/completions", {"prompt": "x", "max_tokens": 1}),
                                ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                          "max_tokens": 1})]:
                r = httpx.post(server.base_url + route, json={"model": alias, **body}, timeout=60)
                err = assert_openai_error(r, 500)
                assert err["code"] == "model_load_failed" and err["type"] == "server_error", err
                assert f"model '{alias}' failed to load" in err["message"], err
                assert "Traceback" not in err["message"], err
                assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
            good()
        assert server.proc.poll() is None
    finally:
        rc = server.stop()
    assert rc == 0, server.log()


def test_config_rejects_an_adapter_whose_tensors_do_not_fit(corpus, tmp_path, tiny_model_path):
    """An adapter whose matrices do not fit its base (here transposed) fails config validation, read
    from the headers, instead of failing that alias's first request (`llamaserve check` reports it)."""
    from llamaserve.config.parse import ConfigError, load_config

    _, adapters = corpus
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"models": [{"alias": "bad-lora", "model": str(tiny_model_path),
                                            "lora_adapters": {str(adapters["transposed"]): 1.0}}]}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.problems) == 1, info.value.problems
    assert "lora-transposed.gguf does not fit" in info.value.problems[0], info.value.problems


def test_config_rejects_unreadable_headers(corpus, tmp_path):
    """Files whose header itself is broken fail config validation (with the file named), not startup."""
    from llamaserve.config.parse import ConfigError, load_config

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
