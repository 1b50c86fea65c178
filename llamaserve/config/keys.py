"""What each config key accepts: the key tables, and the checkers of structured values (media,
speculative decoding, sampling defaults, ...) built from config_values.py's."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llamacore.chat.reasoning import REASONING_FORMATS, REASONING_MODES
from llamacore.gguf.load_options import (
    EMBEDDING_ONLY_KEYS,
    FLASH_ATTN,
    GENERATION_ONLY_KEYS,
    KV_CACHE_TYPES,
    POOLING_TYPES,
    SPLIT_MODES,
)
from llamacore.grammar.json_schema import WHITESPACE
from llamacore.rpc import parse_endpoint
from llamaserve.config.values import (
    Check,
    Invalid,
    at_most,
    boolean,
    choice,
    integer,
    list_of,
    number,
    optional,
    parse_duration,
    parse_size,
    string,
    suggest,
    via,
)

ISOLATION_MODES = ("thread", "process")
DEFAULT_ISOLATION = "thread"     # by measurement: benchmarks/bench_isolation.py (the rule: README, Crash isolation)
UNKNOWN_MODEL_POLICIES = ("error", "default")     # a request naming no configured model: 404, or the default
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
def _flash_attn(v: Any) -> bool | str:
    if v in FLASH_ATTN:
        return str(v)
    try:
        return boolean(v)
    except Invalid:
        raise Invalid(f"expected true, false, {', '.join(FLASH_ATTN[:-1])} or {FLASH_ATTN[-1]}, got {v!r}") from None


def _pooling(v: Any) -> int | str:
    if v in POOLING_TYPES:
        return str(v)
    try:
        return integer(-1, len(POOLING_TYPES) - 2)(v)
    except Invalid:
        raise Invalid(f"expected one of {', '.join(POOLING_TYPES)} (or its number), "
                      f"got {v!r}{suggest(v, POOLING_TYPES)}") from None


def _kv_overrides(v: Any) -> dict:
    if not isinstance(v, Mapping) or not all(
            isinstance(k, str) and isinstance(x, (bool, int, float, str)) for k, x in v.items()):
        raise Invalid(f"expected a mapping of metadata keys to booleans, numbers or strings, got {v!r}")
    return dict(v)


def _reasoning(v: Any) -> str:
    """llama-server's --reasoning: on, off or auto (YAML reads a bare on/off as a boolean)."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return choice(REASONING_MODES)(v.strip().lower() if isinstance(v, str) else v)


def _template_kwargs(v: Any) -> dict[str, Any]:
    """Extra chat template variables: a mapping of names to values (enable_thinking must be a boolean)."""
    if not isinstance(v, Mapping) or not all(isinstance(k, str) and k for k in v):
        raise Invalid(f"expected a mapping of template variable names to values, got {v!r}")
    thinking = v.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise Invalid(f"enable_thinking: expected true or false, got {thinking!r} "
                      "(or use the reasoning key: on, off or auto)")
    return dict(v)


def _cors(v: Any) -> tuple[str, ...]:
    return tuple(list_of(string, "strings")([v] if isinstance(v, str) else v))


def _folders(v: Any) -> list[str]:
    """One folder or a list of them (resolved against the config's folder in config.py); the empty
    list is none, the default, so a config may spell the default out."""
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list):
        raise Invalid(f"expected a folder or a list of folders, got {v!r}")
    return list_of(string, "folders")(v)


MEDIA_KEYS = ("allow_remote", "max_bytes", "max_images_per_request", "timeout", "allowed_dirs", "max_pixels",
              "max_request_pixels", "max_decoding_pixels", "remote_allow")


def _media(v: Any) -> dict[str, Any]:
    """Where images in requests may come from and how large they may be (llamacore.vision.media.MediaPolicy)."""
    if not isinstance(v, Mapping):
        raise Invalid(f"expected a mapping with some of: {', '.join(MEDIA_KEYS)}; got {v!r}")
    checks: dict[str, Check] = {
        "allow_remote": boolean, "max_bytes": via(parse_size, positive=True),
        "max_images_per_request": integer(1), "timeout": via(parse_duration, positive=True),
        "allowed_dirs": _folders, "max_pixels": integer(1), "max_request_pixels": integer(1),
        "max_decoding_pixels": integer(1), "remote_allow": list_of(string, "strings")}
    out = {}
    for key, value in v.items():
        if key not in checks:
            raise Invalid(f"unknown field {key!r}{suggest(key, MEDIA_KEYS)}; expected some of: {', '.join(MEDIA_KEYS)}")
        try:
            out[key] = checks[key](value)
        except Invalid as exc:
            raise Invalid(f"{key}: {exc}") from None
    return out


def _rpc_servers(v: Any) -> list[str]:
    """RPC worker endpoints: a list of "host:port" (or llama-server's comma-separated string)."""
    if isinstance(v, str):
        v = [s for s in v.split(",") if s.strip()]
    endpoints = list_of(string, "host:port strings")(v)
    if not endpoints:
        raise Invalid("expected at least one host:port")
    try:
        return [parse_endpoint(e) for e in endpoints]
    except ValueError as e:
        raise Invalid(str(e)) from None


SPECULATIVE_KEYS = ("draft_model", "n_draft", "ngram_size", "p_min")


def _speculative(v: Any) -> dict[str, Any]:
    """`{draft_model: ngram, n_draft, ngram_size}` (prompt lookup) or `{draft_model: PATH, n_draft, p_min}`
    (a draft model; config.py resolves and checks the path)."""
    if not isinstance(v, Mapping):
        raise Invalid(f"expected a mapping such as {{draft_model: ngram, n_draft: 8}}, got {v!r}")
    for key in v:
        if key not in SPECULATIVE_KEYS:
            raise Invalid(f"unknown key {key!r}{suggest(key, SPECULATIVE_KEYS)}")
    draft = v.get("draft_model")
    if not isinstance(draft, str) or not draft:
        raise Invalid(f"draft_model: expected ngram (drafts by prompt lookup) or the path of a draft GGUF model, "
                      f"got {draft!r}")
    try:       # absent: None, which the engine makes speculative.default_n_draft(model)
        n_draft = integer(1, 64)(v["n_draft"]) if "n_draft" in v else None
    except Invalid as e:
        raise Invalid(f"n_draft: {e}") from None
    if draft == "ngram":
        if "p_min" in v:
            raise Invalid("p_min: applies to draft models; prompt lookup (draft_model: ngram) has no draft "
                          "probabilities")
        try:
            return {"draft_model": "ngram", "n_draft": n_draft, "ngram_size": integer(2, 8)(v.get("ngram_size", 3))}
        except Invalid as e:
            raise Invalid(f"ngram_size: {e}") from None
    if "ngram_size" in v:
        raise Invalid("ngram_size: applies to prompt lookup (draft_model: ngram), not to a draft model")
    p_min = v.get("p_min", 0.0)
    if isinstance(p_min, bool) or not isinstance(p_min, (int, float)) or not 0.0 <= p_min < 1.0:
        raise Invalid(f"p_min: expected a probability in [0, 1), got {p_min!r}")
    return {"draft_model": draft, "n_draft": n_draft, "p_min": float(p_min)}


# request fields a model entry may give defaults for (`sampling:`), with OpenAI's bounds; a request
# that sets a field itself keeps its value
SAMPLING_DEFAULTS: dict[str, Check] = {
    "temperature": at_most(number(), 2.0), "top_p": at_most(number(), 1.0), "top_k": integer(0),
    "min_p": at_most(number(), 1.0), "typical_p": at_most(number(), 1.0), "repeat_penalty": number(),
    "presence_penalty": at_most(number(-2.0), 2.0), "frequency_penalty": at_most(number(-2.0), 2.0),
    "seed": integer(), "max_tokens": integer(1),
    # llama-server's samplers (its names)
    "mirostat": at_most(integer(0), 2), "mirostat_tau": number(), "mirostat_eta": number(),
    "dry_multiplier": number(), "dry_base": number(1.0), "dry_allowed_length": integer(0),
    "dry_penalty_last_n": integer(0), "xtc_probability": at_most(number(), 1.0), "xtc_threshold": number(),
    "top_n_sigma": number(-1.0), "dynatemp_range": number(), "dynatemp_exponent": number(), "min_keep": integer(0),
}


def _sampling(v: Any) -> dict[str, Any]:
    """`{temperature: 0.7, max_tokens: 256, ...}`: what a request gets for the fields it leaves out."""
    if not isinstance(v, dict):
        raise Invalid(f"expected a mapping of request fields to default values, got {v!r}")
    out = {}
    for key, value in v.items():
        if key not in SAMPLING_DEFAULTS:
            raise Invalid(f"unknown field {key!r}{suggest(key, SAMPLING_DEFAULTS)}; "
                          f"expected some of: {', '.join(SAMPLING_DEFAULTS)}")
        try:
            out[key] = SAMPLING_DEFAULTS[key](value)
        except Invalid as exc:
            raise Invalid(f"{key}: {exc}") from None
    return out


ROOT_KEYS: dict[str, Check] = {
    "host": string, "port": integer(1, 65535), "api_key": optional(lambda v: str(v)),
    "admin_key": optional(lambda v: str(v)), "allowed_hosts": list_of(string, "strings"),
    "require_api_key": boolean,
    "default_model": optional(string), "models_dir": optional(string),
    "adapters_dir": optional(_folders), "persist_adapters": boolean,
    "max_loaded_models": optional(integer(1)), "memory_budget": optional(via(parse_size, positive=True)),
    "idle_unload": optional(via(parse_duration)), "parallel": integer(1), "max_queue": integer(0),
    "lora_steps_per_turn": integer(1), "kv_unified": boolean, "share_prefixes": boolean, "cache_ram": via(parse_size),
    "log_level": choice(LOG_LEVELS), "cors": _cors, "cors_credentials": boolean,
    "max_body_bytes": via(parse_size, positive=True), "send_timeout": via(parse_duration),
    "shutdown_grace": number(), "drain_delay": via(parse_duration), "ready_requires_model": boolean,
    "web_ui": boolean, "unknown_model": choice(UNKNOWN_MODEL_POLICIES), "metrics": boolean,
    "verbose_responses": boolean,
    "grammar_cache_size": via(parse_size), "grammar_max_size": via(parse_size, positive=True),
    "grammar_max_depth": integer(1), "grammar_timeout": via(parse_duration, positive=True),
    "grammar_work_limit": integer(0),
    "responses_store_size": integer(0), "responses_store_bytes": via(parse_size, positive=True), "media": _media,
}
LOAD_KEYS: dict[str, Check] = {      # the keys of llamacore.gguf.load_options.LOAD_KEYS
    "n_ctx": integer(0), "n_batch": integer(1), "n_ubatch": integer(1),
    "n_threads": optional(integer(1)), "n_threads_batch": optional(integer(1)),
    "n_gpu_layers": integer(-1), "main_gpu": integer(0), "split_mode": choice(SPLIT_MODES),
    "tensor_split": list_of(number(), "numbers"), "use_mmap": boolean, "use_mlock": boolean,
    "flash_attn": _flash_attn,
    "type_k": choice(KV_CACHE_TYPES), "type_v": choice(KV_CACHE_TYPES), "offload_kqv": boolean,
    "rope_freq_base": number(), "rope_freq_scale": number(), "embedding": boolean,
    "pooling_type": _pooling, "kv_overrides": _kv_overrides, "rpc_servers": _rpc_servers,
    "seed": integer(),
}
ENTRY_KEYS: dict[str, Check] = {
    "alias": string, "model_alias": string, "aliases": list_of(string, "strings"), "model": string,
    "clip_model_path": string, "mmproj": string,       # a vision projector (llama-cpp-python's / llama-server's name)
    "lora_adapters": lambda v: v,   # resolved against the config's folder in config.py
    "adapters": lambda v: v,        # likewise
    "chat_format": optional(string), "chat_template": optional(string), "chat_template_file": optional(string),
    "chat_template_kwargs": optional(_template_kwargs), "reasoning": optional(_reasoning),
    "reasoning_format": optional(choice(REASONING_FORMATS)),
    "idle_unload": optional(via(parse_duration)), "parallel": optional(integer(1)),
    "max_queue": optional(integer(0)), "lora_steps_per_turn": optional(integer(1)),
    "kv_unified": optional(boolean), "share_prefixes": optional(boolean), "cache_ram": optional(via(parse_size)),
    "speculative": optional(_speculative),
    "json_whitespace": optional(choice(tuple(WHITESPACE))), "sampling": optional(_sampling),
    "isolation": optional(choice(ISOLATION_MODES)), "step_timeout": optional(via(parse_duration, positive=True)),
    "max_rss": optional(via(parse_size, positive=True)), **LOAD_KEYS,
}
NAME_KEYS = ("alias", "model_alias", "aliases")
ADAPTER_ITEM_KEYS = ("path", "name")     # the keys of one mapping in an entry's adapters list
# keys still accepted (and type-checked) for one release; loading a config that sets one logs why
# it no longer does anything
DEPRECATED_KEYS: dict[str, str] = {
    "lora_steps_per_turn": "sequences with different LoRA adapters now decode in one batch, so "
                           "adapter groups no longer take turns; remove the key",
}


MAX_SCALE = 10.0     # |scale| beyond this only ever breaks a model's output


def scale(v: Any) -> float:
    """A LoRA adapter scale: a finite number in [-MAX_SCALE, MAX_SCALE] (negative ones subtract it)."""
    value = number(-math.inf)(v)
    if not -MAX_SCALE <= value <= MAX_SCALE:
        raise Invalid(f"must be a finite number between {-MAX_SCALE:g} and {MAX_SCALE:g}, got {value}")
    return value


def kind_problems(load: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for each load key of an entry that its kind of model has no use for.

    Such a key would otherwise be dropped silently: pooling_type means nothing to a generation
    model, seed (the default sampling seed) and speculative nothing to an embedding model.
    """
    if load.get("embedding"):
        return [(key, ("applies only to generation models (embedding models do not sample); "
                       "remove it from this entry or from defaults"))
                for key in sorted((GENERATION_ONLY_KEYS | {"speculative"}) & load.keys())]
    return [(key, ("applies only to embedding models (embedding: true); "
                   "remove it from this entry or from defaults"))
            for key in sorted(EMBEDDING_ONLY_KEYS & load.keys())]
