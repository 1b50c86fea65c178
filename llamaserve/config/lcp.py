"""llama-cpp-python server config files, read unchanged (`python -m llama_cpp.server --config_file`).

Their format is `ConfigFileSettings` of llama_cpp/server/settings.py (0.3.x): the server keys at
the top level and a ``models`` list of `ModelSettings`. Most of their keys are llamaserve's too
(``model_alias`` included). Before validation, every config passes through
`translate_lcp_config`, which puts the rest in llamaserve's terms; every key of theirs is in
exactly one table below:

- SAME_ROOT, SAME_MODEL: same name and meaning; a few also take their spelling of the value
  (split_mode and type_k/type_v as enum numbers, kv_overrides as "key=type:value" strings,
  n_threads -1 for every core, seed -1 for a random one);
- CONVERTED_MODEL: lora_path, draft_model and draft_model_num_pred_tokens become our keys, and
  hf_model_repo_id makes ``model`` (and ``clip_model_path``), globs in that repository, hf://
  references (llamaserve.config.hub);
- IGNORED_ROOT, IGNORED_MODEL: named in one warning per entry, with why; none of them changes
  what a request returns;
- DEFAULT_ONLY_MODEL: ignored (and named so) at llama-cpp-python's default, refused otherwise,
  since llamaserve cannot do what another value asks;
- REFUSED_ROOT: a config error when set (to anything but null).

Their keys are unknown to llamaserve's validation and their value spellings invalid there, so a
llamaserve config passes unchanged. Their ``null`` is "not set": null values of their optional
keys are dropped. What stays llamaserve's own (README, "llama-cpp-python config files"): relative
paths are relative to the config file's folder, an entry without ``model_alias`` is named after
its file (not its ``model`` string), and a request naming no configured model gets the first
model only with ``unknown_model: default``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from llamacore.gguf.load_options import KV_CACHE_TYPES, SPLIT_MODES
from llamaserve.config.checks import Problems
from llamaserve.config.hub import SCHEME

__all__ = ["translate_lcp_config"]

log = logging.getLogger(__name__)

_RANDOM_SEEDS = (-1, 0xFFFFFFFF)      # LLAMA_DEFAULT_SEED: a random seed, as without one here
_GGML_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 30: "bf16"}
assert set(_GGML_TYPES.values()) == set(KV_CACHE_TYPES)

# ServerSettings and ModelSettings keys that mean here what they mean there
SAME_ROOT = ("host", "port", "api_key")
SAME_MODEL = ("model", "model_alias", "n_gpu_layers", "split_mode", "main_gpu", "tensor_split", "use_mmap",
              "use_mlock", "kv_overrides", "rpc_servers", "seed", "n_ctx", "n_batch", "n_ubatch", "n_threads",
              "n_threads_batch", "rope_freq_base", "rope_freq_scale", "embedding", "offload_kqv",
              "flash_attn", "chat_format", "chat_template_kwargs", "type_k", "type_v", "clip_model_path")
CONVERTED_MODEL = {
    "lora_path": "lora_adapters (the adapter at scale 1.0)",
    "draft_model": "speculative: {draft_model: ngram, n_draft, ngram_size: 2} (prompt lookup, as theirs)",
    "draft_model_num_pred_tokens": "speculative.n_draft",
    "hf_model_repo_id": "model: hf://REPO/MODEL and clip_model_path: hf://REPO/CLIP_MODEL_PATH (fetched on first load)",
}
IGNORED_ROOT = {
    "interrupt_requests": "llamaserve decodes concurrent requests together; none interrupts another",
    "disable_ping_events": "llamaserve sends no ping events in its streams",
    "root_path": "routes are served at /v1/...; let the reverse proxy strip its prefix",
}
IGNORED_MODEL = {
    "verbose": "log_level sets how much llamaserve logs",
    "cache": "llamaserve reuses matching prompt prefixes in the KV cache itself (share_prefixes)",
    "cache_type": "see cache",
    "cache_size": "see cache",
    "logits_all": "logprobs are computed when a request asks for them",
    "mul_mat_q": "no longer an option of llama.cpp",
    "numa": "NUMA placement is llama.cpp's default",
    "lora_base": "llama-cpp-python does not use it either",
    "hf_tokenizer_config_path": "only chat_format hf-tokenizer-config reads it, which llamaserve lacks",
    "hf_pretrained_model_name_or_path": "llamaserve tokenizes with the GGUF file's own tokenizer",
}
DEFAULT_ONLY_MODEL: dict[str, tuple[Any, str]] = {      # key: (their default, what llamaserve does)
    "vocab_only": (False, "a served model needs its weights"),
    "rope_scaling_type": (-1, "the RoPE scaling type comes from the model file"),
    "yarn_ext_factor": (-1.0, "YaRN parameters come from the model file"),
    "yarn_attn_factor": (1.0, "YaRN parameters come from the model file"),
    "yarn_beta_fast": (32.0, "YaRN parameters come from the model file"),
    "yarn_beta_slow": (1.0, "YaRN parameters come from the model file"),
    "yarn_orig_ctx": (0, "YaRN parameters come from the model file"),
    "last_n_tokens_size": (64, "the repeat-penalty window is 64 tokens"),
}
REFUSED_ROOT = {
    "ssl_keyfile": "llamaserve serves plain HTTP; put a TLS-terminating reverse proxy in front of it",
    "ssl_certfile": "llamaserve serves plain HTTP; put a TLS-terminating reverse proxy in front of it",
}
# their Optional keys: null means "not set"
_OPTIONAL = frozenset({"model_alias", "tensor_split", "kv_overrides", "rpc_servers", "chat_format", "type_k",
                       "type_v", "lora_base", "lora_path", "chat_template_kwargs", "clip_model_path",
                       "hf_tokenizer_config_path", "hf_pretrained_model_name_or_path", "hf_model_repo_id",
                       "draft_model", "api_key", "ssl_keyfile", "ssl_certfile"})


def translate_lcp_config(data: dict, problems: Problems) -> dict:
    """``data`` with llama-cpp-python's keys and values in llamaserve's; refusals go to ``problems``.

    Their keys are not llamaserve's, and their spellings of shared keys' values are invalid in
    llamaserve's own, so a llamaserve config passes unchanged. Values that are not valid in their
    spelling either are left for validation to report.
    """
    out: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in data.items():
        if key in REFUSED_ROOT:
            if value is not None:
                problems.add(key, f"llama-cpp-python's {key} is not supported: {REFUSED_ROOT[key]}")
        elif key in IGNORED_ROOT:
            ignored.append(f"{key} ({IGNORED_ROOT[key]})")
        else:
            out[key] = value                            # ours, or unknown: validation reports it
    _warn_ignored("", ignored, problems)
    if isinstance(out.get("defaults"), dict):
        out["defaults"] = _entry(out["defaults"], "defaults", problems)
    if isinstance(out.get("models"), list):
        out["models"] = [_entry(m, f"models[{i}]", problems) if isinstance(m, dict) else m
                         for i, m in enumerate(out["models"])]
    return out


def _entry(raw: dict, label: str, problems: Problems) -> dict:
    out: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in raw.items():
        if value is None and key in _OPTIONAL:
            continue                                   # their null: not set
        if key in IGNORED_MODEL:
            ignored.append(f"{key} ({IGNORED_MODEL[key]})")
        elif key in DEFAULT_ONLY_MODEL:
            default, ours = DEFAULT_ONLY_MODEL[key]
            if _is_default(value, default):
                ignored.append(f"{key} (at its default: {ours})")
            else:
                problems.add(f"{label}.{key}", f"llama-cpp-python's {key} is not supported: {ours} "
                                               f"(remove it, or set its default {default!r}), got {value!r}")
        elif key in _CONVERT:
            converted = _CONVERT[key](value)
            if converted is not None:
                out[key] = converted
        elif key not in CONVERTED_MODEL:
            out[key] = value                            # ours, or unknown: validation reports it
    _convert_hub(raw, out, label, problems)
    _convert_lora(raw, out, label, problems)
    _convert_draft(raw, out, label, problems, ignored)
    _warn_ignored(f"{label}: ", ignored, problems)
    return out


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return value is default
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == default


def _warn_ignored(prefix: str, ignored: list[str], problems: Problems) -> None:
    if ignored:
        log.warning("%s: %sllama-cpp-python keys ignored: %s", problems.label, prefix, "; ".join(ignored))


def _convert_hub(raw: dict, out: dict, label: str, problems: Problems) -> None:
    """Their hf_model_repo_id: ``model`` and ``clip_model_path`` are globs in that repository."""
    repo = raw.get("hf_model_repo_id")
    if repo is None:
        return
    if not isinstance(repo, str) or repo.count("/") != 1:
        problems.add(f"{label}.hf_model_repo_id",
                     f"expected a Hugging Face Hub repository id (owner/name), got {repo!r}")
        return
    for key in ("model", "clip_model_path"):
        if isinstance(raw.get(key), str):
            out[key] = f"{SCHEME}{repo}/{raw[key]}"


def _convert_lora(raw: dict, out: dict, label: str, problems: Problems) -> None:
    path = raw.get("lora_path")
    if path is None:
        return
    if "lora_adapters" in raw:
        problems.add(f"{label}.lora_path", "give either lora_path or lora_adapters, not both")
    elif not isinstance(path, str) or not path:
        problems.add(f"{label}.lora_path", f"expected the path of a LoRA adapter file, got {path!r}")
    else:
        out["lora_adapters"] = {path: 1.0}


def _convert_draft(raw: dict, out: dict, label: str, problems: Problems, ignored: list[str]) -> None:
    n_pred = raw.get("draft_model_num_pred_tokens")
    if raw.get("draft_model") is None:
        if n_pred is not None:
            ignored.append("draft_model_num_pred_tokens (no draft_model is set)")
        return
    if "speculative" in raw:
        problems.add(f"{label}.draft_model", "give either draft_model or speculative, not both")
        return
    # any draft_model makes llama-cpp-python's server use prompt lookup with 2-token n-grams
    n_draft = 10 if n_pred is None else n_pred          # their default
    out["speculative"] = {"draft_model": "ngram", "n_draft": n_draft, "ngram_size": 2}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _split_mode(v: Any) -> Any:
    """Their llama_split_mode number (0 none, 1 layer, 2 row) as its name."""
    return SPLIT_MODES[v] if _is_int(v) and 0 <= v < len(SPLIT_MODES) else v


def _cache_type(v: Any) -> Any:
    """Their ggml_type number as its name."""
    return _GGML_TYPES.get(v, v) if _is_int(v) else v


_KV_TYPES: dict[str, Callable[[str], Any]] = {
    "bool": lambda t: t.lower() in ("true", "1"), "int": int, "float": float, "str": str}


def _kv_overrides(v: Any) -> Any:
    """Their list of "key=type:value" strings (type bool, int, float or str) as a mapping."""
    if not isinstance(v, list):
        return v
    out: dict[str, Any] = {}
    for item in v:
        key, _, typed = item.partition("=") if isinstance(item, str) else ("", "", "")
        kind, _, text = typed.partition(":")
        parse = _KV_TYPES.get(kind)
        try:
            if not key or parse is None:
                return v
            out[key] = parse(text)
        except ValueError:
            return v
    return out


def _threads(*all_cores: int) -> Callable[[Any], Any]:
    """Their thread counts that mean every core (-1, and 0 for n_threads_batch) as that number."""
    def check(v: Any) -> Any:
        return (os.cpu_count() or 1) if _is_int(v) and v in all_cores else v
    return check


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "split_mode": _split_mode, "type_k": _cache_type, "type_v": _cache_type, "kv_overrides": _kv_overrides,
    "n_threads": _threads(-1), "n_threads_batch": _threads(-1, 0),
    "seed": lambda v: None if _is_int(v) and v in _RANDOM_SEEDS else v,    # a random seed: the default
}
