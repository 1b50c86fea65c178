"""llama-cpp-python server config files (`python -m llama_cpp.server --config_file`) load unchanged.

The configs here are written as llama-cpp-python's docs/server.md shows them; every key of its
ServerSettings and ModelSettings is mapped, ignored with a warning that names it, or refused.
"""

from __future__ import annotations

import json
import logging
import os

import pytest
from helpers import N_THREADS, REPO_ROOT, problems, write

from llamaserve.config import lcp as config_lcp
from llamaserve.config.parse import load_config

# llama_cpp/server/settings.py of llama-cpp-python 0.3.36: every field of the two classes
LCP_SERVER_KEYS = ("host", "port", "ssl_keyfile", "ssl_certfile", "api_key", "interrupt_requests",
                   "disable_ping_events", "root_path")
LCP_MODEL_KEYS = (
    "model", "model_alias", "n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "vocab_only",
    "use_mmap", "use_mlock", "kv_overrides", "rpc_servers", "seed", "n_ctx", "n_batch", "n_ubatch",
    "n_threads", "n_threads_batch", "rope_scaling_type", "rope_freq_base", "rope_freq_scale",
    "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_orig_ctx", "mul_mat_q",
    "logits_all", "embedding", "offload_kqv", "flash_attn", "last_n_tokens_size", "lora_base", "lora_path",
    "numa", "chat_format", "chat_template_kwargs", "clip_model_path", "cache", "cache_type", "cache_size",
    "hf_tokenizer_config_path", "hf_pretrained_model_name_or_path", "hf_model_repo_id", "draft_model",
    "draft_model_num_pred_tokens", "type_k", "type_v", "verbose",
)

# docs/server.md, "Configuration and Multi-Model Support"
DOCS_JSON = {
    "host": "0.0.0.0",
    "port": 8080,
    "models": [
        {"model": "models/model.gguf", "model_alias": "gpt-3.5-turbo", "chat_format": "chatml",
         "n_gpu_layers": -1, "offload_kqv": True, "n_threads": 12, "n_batch": 512, "n_ctx": 2048},
        {"model": "models/model.gguf", "model_alias": "gpt-4", "chat_format": "chatml",
         "n_gpu_layers": -1, "offload_kqv": True, "n_threads": 12, "n_batch": 512, "n_ctx": 2048},
        {"model": "models/model.gguf", "model_alias": "gpt-4-vision-preview", "chat_format": "llava-1-5",
         "clip_model_path": "models/mmproj-model-f16.gguf", "n_gpu_layers": -1, "offload_kqv": True,
         "n_threads": 12, "n_batch": 512, "n_ctx": 2048},
        {"model": "models/model.gguf", "model_alias": "text-davinci-003",
         "n_gpu_layers": -1, "offload_kqv": True, "n_threads": 12, "n_batch": 512, "n_ctx": 2048},
        {"model": "models/model.gguf", "model_alias": "copilot-codex",
         "n_gpu_layers": -1, "offload_kqv": True, "n_threads": 12, "n_batch": 1024, "n_ctx": 9216},
    ],
}

# the same format as YAML, with their keys that need translating or are ignored
LCP_YAML = """
host: 0.0.0.0
port: 8080
interrupt_requests: false
disable_ping_events: true
models:
  - model: models/model.gguf
    model_alias: tuned
    chat_format: llama-2
    lora_path: models/lora-a.gguf
    lora_base: null
    n_threads: -1
    n_threads_batch: 0
    split_mode: 2
    type_k: 8
    type_v: 1
    kv_overrides: ["tokenizer.ggml.add_bos_token=bool:false", "some.int=int:3"]
    seed: 4294967295
    verbose: false
    cache: true
    cache_type: disk
    yarn_ext_factor: -1.0
    last_n_tokens_size: 64
  - model: models/model.gguf
    model_alias: fast
    draft_model: prompt-lookup-decoding
    draft_model_num_pred_tokens: 5
    seed: 42
"""


def test_every_key_of_theirs_is_mapped_ignored_or_refused():
    tables = {
        "root": (config_lcp.SAME_ROOT, config_lcp.IGNORED_ROOT, config_lcp.REFUSED_ROOT),
        "model": (config_lcp.SAME_MODEL, config_lcp.CONVERTED_MODEL, config_lcp.IGNORED_MODEL,
                  config_lcp.DEFAULT_ONLY_MODEL),
    }
    for kind, keys in (("root", LCP_SERVER_KEYS), ("model", LCP_MODEL_KEYS)):
        listed = [k for table in tables[kind] for k in table]
        assert sorted(listed) == sorted(keys), kind      # each exactly once, and no other


def test_the_docs_json_config_loads_unchanged(work, projector_path):
    from gguf_files import place

    place(projector_path, work / "models/mmproj-model-f16.gguf")
    config = load_config(write(work, "lcp.json", json.dumps(DOCS_JSON)))
    assert (config.host, config.port) == ("0.0.0.0", 8080)
    assert [e.alias for e in config.models] == ["gpt-3.5-turbo", "gpt-4", "gpt-4-vision-preview", "text-davinci-003",
                                                "copilot-codex"]
    vision = config.models[2]
    assert vision.clip_model_path == work / "models/mmproj-model-f16.gguf" and vision.chat_format == "llava-1-5"
    first = config.models[0]
    assert first.model == work / "models/model.gguf"
    assert first.chat_format == "chatml" and config.models[3].chat_format is None
    assert dict(first.load) == {"n_gpu_layers": -1, "offload_kqv": True, "n_threads": 12, "n_batch": 512,
                                "n_ctx": 2048}
    assert config.models[4].load["n_ctx"] == 9216
    # the first two share one loaded model, as llamaserve entries on one file with equal load keys do
    assert first.base_key() == config.models[1].base_key() != config.models[4].base_key()
    assert vision.base_key() != first.base_key()           # the projector makes it another base


def test_their_keys_and_value_spellings_are_translated(work, caplog):
    with caplog.at_level(logging.WARNING, logger="llamaserve.config.lcp"):
        config = load_config(write(work, "lcp.yaml", LCP_YAML))
    tuned, fast = config.models
    assert tuned.alias == "tuned" and tuned.chat_format == "llama-2"
    assert tuned.lora_adapters == ((work / "models/lora-a.gguf", 1.0),)
    assert dict(tuned.load) == {
        "n_threads": os.cpu_count(), "n_threads_batch": os.cpu_count(), "split_mode": "row", "type_k": "q8_0",
        "type_v": "f16", "kv_overrides": {"tokenizer.ggml.add_bos_token": False, "some.int": 3},
    }                                               # seed 0xFFFFFFFF is their random seed: none set
    assert fast.speculative == {"draft_model": "ngram", "n_draft": 5, "ngram_size": 2} and fast.load["seed"] == 42
    assert tuned.base_key() != fast.base_key()
    warnings = [r.getMessage() for r in caplog.records if r.name == "llamaserve.config.lcp"]
    assert len(warnings) == 2
    root, entry = warnings
    assert root.startswith(f"{work / 'lcp.yaml'}: llama-cpp-python keys ignored: interrupt_requests (")
    assert "disable_ping_events (" in root
    assert entry.startswith(f"{work / 'lcp.yaml'}: models[0]: llama-cpp-python keys ignored: verbose (")
    for key in ("cache (", "cache_type (", "yarn_ext_factor (at its default",
                "last_n_tokens_size (at its default"):
        assert key in entry
    assert "lora_base" not in entry                 # null: not set


def test_a_llamaserve_config_gets_no_warning(work, caplog):
    with caplog.at_level(logging.WARNING, logger="llamaserve.config.lcp"):
        load_config(write(work, "ours.json", json.dumps(DOCS_JSON)))
    assert [r for r in caplog.records if r.name == "llamaserve.config.lcp"] == []


def test_what_llamaserve_cannot_do_is_refused_all_at_once(work):
    llava = {"model": "models/model.gguf", "model_alias": "gpt-4-vision-preview", "chat_format": "llava-1-5",
             "clip_model_path": "models/no-such-mmproj.gguf", "n_gpu_layers": -1}
    hub = {"model": "*q8_0.gguf", "hf_model_repo_id": "Qwen/Qwen2-0.5B-Instruct-GGUF/extra"}
    tweaked = {"model": "models/model.gguf", "model_alias": "tweaked", "yarn_orig_ctx": 4096,
               "vocab_only": True, "last_n_tokens_size": 128,
               "lora_path": "models/lora-a.gguf", "lora_adapters": ["models/lora-b.gguf"]}
    path = write(work, "refused.json", json.dumps({"ssl_keyfile": "key.pem", "ssl_certfile": None,
                                                    "models": [llava, hub, tweaked]}))
    found = problems(path)
    expected = [
        "ssl_keyfile: llama-cpp-python's ssl_keyfile is not supported: llamaserve serves plain HTTP",
        "models[0].clip_model_path: file not found",
        "models[1].hf_model_repo_id: expected a Hugging Face Hub repository id (owner/name), got "
        "'Qwen/Qwen2-0.5B-Instruct-GGUF/extra'",
        "models[2].yarn_orig_ctx: llama-cpp-python's yarn_orig_ctx is not supported: YaRN parameters come "
        "from the model file (remove it, or set its default 0), got 4096",
        "models[2].vocab_only: llama-cpp-python's vocab_only is not supported",
        "models[2].last_n_tokens_size: llama-cpp-python's last_n_tokens_size is not supported: the "
        "repeat-penalty window is 64 tokens",
        "models[2].lora_path: give either lora_path or lora_adapters, not both",
    ]
    for line in expected:
        assert sum(p.startswith(f"{path}: {line}") for p in found) == 1, (line, found)
    assert not any("ssl_certfile" in p for p in found)      # null: not set


def test_hf_model_repo_id_makes_model_and_projector_hub_references(work):
    """Theirs downloads `model` (a glob) from the repository with Llama.from_pretrained, and so
    clip_model_path with the handler's from_pretrained: here both become hf:// references,
    fetched when the model first loads (tests/llamaserve/config/test_hub_models.py)."""
    from llamaserve.config.hub import HubFile

    repo = "Qwen/Qwen2-0.5B-Instruct-GGUF"
    config = load_config(write(work, "hub.json", json.dumps({"models": [
        {"model": "*q8_0.gguf", "hf_model_repo_id": repo, "model_alias": "qwen"},
        {"model": "*q4_0.gguf", "hf_model_repo_id": repo, "chat_format": "llava-1-5", "clip_model_path": "mmproj-*"},
        {"model": "models/model.gguf", "hf_model_repo_id": None},
    ]})))
    qwen, vision, local = config.models
    assert (qwen.alias, qwen.model, qwen.clip_model_path) == ("qwen", HubFile(repo, "*q8_0.gguf"), None)
    assert (vision.model, vision.clip_model_path) == (HubFile(repo, "*q4_0.gguf"), HubFile(repo, "mmproj-*"))
    assert vision.alias == f"{repo}/*q4_0.gguf"          # theirs: the model string; here the reference's
    assert local.model == work / "models/model.gguf"     # null: not set


def test_values_invalid_in_their_spelling_too_get_llamaserves_messages(work):
    path = write(work, "bad.json", json.dumps({"models": [
        {"model": "models/model.gguf", "split_mode": 7, "type_k": 12, "kv_overrides": ["a=complex:1"],
         "n_threads": -2}]}))
    found = problems(path)
    for key in ("split_mode: expected one of none, layer, row, tensor, got 7", "type_k: expected one of f32",
                "kv_overrides: expected a mapping", "n_threads: must be at least 1, got -2"):
        assert any(p.startswith(f"{path}: models[0].{key}") for p in found), (key, found)


@pytest.mark.server
@pytest.mark.slow
def test_a_llama_cpp_python_json_config_serves(tmp_path, tiny_model_path):
    """`llamaserve --config their.json` serves a chat request by the entry's model_alias."""
    from server import ServerProcess

    entry = {"model": str(tiny_model_path), "model_alias": "gpt-3.5-turbo", "chat_format": "chatml",
             "n_gpu_layers": -1, "offload_kqv": True, "n_threads": N_THREADS, "n_batch": 512, "n_ctx": 256,
             "verbose": False, "cache": False, "lora_base": None, "seed": -1}
    config = {"interrupt_requests": True, "models": [entry]}
    proc = ServerProcess(config, tmp_path, name="config.json").start()
    try:
        assert json.loads(proc.config_path.read_text())["models"][0]["model_alias"] == "gpt-3.5-turbo"
        resp = proc.post("/v1/chat/completions", json={
            "model": "gpt-3.5-turbo", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["model"] == "gpt-3.5-turbo" and body["usage"]["completion_tokens"] >= 1
        assert [m["id"] for m in proc.get("/v1/models").json()["data"]] == ["gpt-3.5-turbo"]
    finally:
        proc.stop()
    log = proc.log()
    assert "models[0]: llama-cpp-python keys ignored: verbose (" in log and "interrupt_requests (" in log


def test_the_docs_example_loads(work):
    page = (REPO_ROOT / "docs" / "migrating" / "from-llama-cpp-python.md").read_text()
    section = page[page.index("```json\n") - 1:]
    block = section[section.index("```json\n") + 8:section.index("```\n", section.index("```json\n") + 8)]
    data = json.loads(block)
    data["models"][0]["model"] = "models/model.gguf"      # the generated model in place of the named file
    config = load_config(write(work, "readme.json", json.dumps(data)))
    assert [e.alias for e in config.models] == ["gpt-3.5-turbo"] and config.models[0].chat_format == "chatml"
