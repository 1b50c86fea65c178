"""What each config key accepts: value checkers, size and duration parsers, the key tables.

Each checker returns the clean value or raises Invalid with a message that names the expected
type and the bad value; config.py adds the file and key path, so every message reads the same.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from llamacore.json_grammar import WHITESPACE
from llamacore.options import (
    EMBEDDING_ONLY_KEYS,
    FLASH_ATTN,
    GENERATION_ONLY_KEYS,
    KV_CACHE_TYPES,
    POOLING_TYPES,
    SPLIT_MODES,
)
from llamacore.reasoning import REASONING_FORMATS, REASONING_MODES
from llamacore.rpc import parse_endpoint

ISOLATION_MODES = ("thread", "process")
DEFAULT_ISOLATION = "thread"     # by measurement: benchmarks/bench_isolation.py (the rule: README, Crash isolation)
UNKNOWN_MODEL_POLICIES = ("error", "default")     # a request naming no configured model: 404, or the default
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(?:([kmgtp])(i)?)?(b)?\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(s|m|h)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {None: 1, "s": 1, "m": 60, "h": 3600}


def parse_size(text: int | str) -> int:
    """Bytes from an int or "500MB" / "12GiB" / "2G".

    KB, MB, GB, TB are powers of 1000; KiB, MiB, ... and the bare K, M, G, T (as in Docker) of 1024.
    """
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    match = _SIZE.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"invalid size {text!r} (use bytes or a number with a unit: 500MB, 12GiB, 2G)")
    number, prefix, binary, byte = match.groups()
    exponent = "kmgtp".index(prefix.lower()) + 1 if prefix else 0
    base = 1000 if prefix and byte and not binary else 1024
    size = float(number) * base**exponent
    if not math.isfinite(size):
        raise ValueError(f"size {str(text)[:40]!r} is too large")
    return round(size)


def parse_duration(value: float | str) -> float:
    """Seconds from a number or "90s" / "5m" / "1.5h"; "never" is infinity."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str) and value.strip().lower() == "never":
        return math.inf
    match = _DURATION.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"invalid duration {value!r} (use seconds, or a number with s, m or h, or 'never')")
    return float(match[1]) * _DURATION_UNITS[match[2] and match[2].lower()]


class Invalid(Exception):
    """A value's problem; the caller prefixes the file and key path."""


class EnvStr(str):
    """A string produced by ${VAR} interpolation: numeric and boolean keys may parse it."""


Check = Callable[[Any], Any]
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _int(lo: int | None = None, hi: int | None = None) -> Check:
    def check(v: Any) -> int:
        if isinstance(v, EnvStr) and re.fullmatch(r"\s*-?\d+\s*", v):
            try:
                v = int(v)
            except ValueError:      # more digits than int() accepts
                raise Invalid(f"expected an integer, got {v[:40]!r}...") from None
        if not isinstance(v, int) or isinstance(v, bool):
            raise Invalid(f"expected an integer, got {v!r}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise Invalid(f"must be {bound}, got {v}")
        return v
    return check


def _float(lo: float = 0.0) -> Check:
    def check(v: Any) -> float:
        if isinstance(v, EnvStr):
            try:
                v = float(v)
            except ValueError:
                pass
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise Invalid(f"expected a number, got {v!r}")
        try:
            v = float(v)
        except OverflowError:       # an integer with hundreds of digits
            raise Invalid("number is too large") from None
        if math.isnan(v):
            raise Invalid("expected a number, got nan")
        if v < lo:
            raise Invalid(f"must be at least {lo}, got {v}")
        return v
    return check


def _bool(v: Any) -> bool:
    if isinstance(v, EnvStr) and v.strip().lower() in _TRUE + _FALSE:
        return v.strip().lower() in _TRUE
    if not isinstance(v, bool):
        raise Invalid(f"expected true or false, got {v!r}")
    return v


def string(v: Any) -> str:
    """A non-empty string (also used for paths before they are resolved)."""
    if not isinstance(v, str) or not v:
        raise Invalid(f"expected a non-empty string, got {v!r}")
    return str(v)


def _choice(options: tuple[str, ...]) -> Check:
    def check(v: Any) -> str:
        if v not in options:
            raise Invalid(f"expected one of {', '.join(options)}, got {v!r}{suggest(v, options)}")
        return str(v)
    return check


def _optional(check: Check) -> Check:
    return lambda v: None if v is None else check(v)


def _flash_attn(v: Any) -> bool | str:
    if v in FLASH_ATTN:
        return str(v)
    try:
        return _bool(v)
    except Invalid:
        raise Invalid(f"expected true, false, {', '.join(FLASH_ATTN[:-1])} or {FLASH_ATTN[-1]}, got {v!r}") from None


def _pooling(v: Any) -> int | str:
    if v in POOLING_TYPES:
        return str(v)
    try:
        return _int(-1, len(POOLING_TYPES) - 2)(v)
    except Invalid:
        raise Invalid(f"expected one of {', '.join(POOLING_TYPES)} (or its number), "
                      f"got {v!r}{suggest(v, POOLING_TYPES)}") from None


def _list_of(check: Check, what: str) -> Check:
    def list_check(v: Any) -> list:
        if not isinstance(v, list):
            raise Invalid(f"expected a list of {what}, got {v!r}")
        return [check(item) for item in v]
    return list_check


def _via(parse: Callable[[Any], Any], positive: bool = False) -> Check:
    def check(v: Any) -> Any:
        try:
            result = parse(v)
        except (ValueError, TypeError, OverflowError) as e:
            raise Invalid(str(e)) from None
        if positive and not result > 0:
            raise Invalid(f"must be greater than zero, got {v!r}")
        return result
    return check


def _kv_overrides(v: Any) -> dict:
    if not isinstance(v, Mapping) or not all(
            isinstance(k, str) and isinstance(x, (bool, int, float, str)) for k, x in v.items()):
        raise Invalid(f"expected a mapping of metadata keys to booleans, numbers or strings, got {v!r}")
    return dict(v)


def _reasoning(v: Any) -> str:
    """llama-server's --reasoning: on, off or auto (YAML reads a bare on/off as a boolean)."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return _choice(REASONING_MODES)(v.strip().lower() if isinstance(v, str) else v)


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
    return tuple(_list_of(string, "strings")([v] if isinstance(v, str) else v))


def _folders(v: Any) -> list[str]:
    """One folder or a list of them (resolved against the config's folder in config.py)."""
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v:
        raise Invalid(f"expected a folder or a list of folders, got {v!r}")
    return _list_of(string, "folders")(v)


MEDIA_KEYS = ("allow_remote", "max_bytes", "max_images_per_request", "timeout", "allowed_dirs", "max_pixels")


def _media(v: Any) -> dict[str, Any]:
    """Where images in requests may come from and how large they may be (llamacore.media.MediaPolicy)."""
    if not isinstance(v, Mapping):
        raise Invalid(f"expected a mapping with some of: {', '.join(MEDIA_KEYS)}; got {v!r}")
    checks: dict[str, Check] = {
        "allow_remote": _bool, "max_bytes": _via(parse_size, positive=True),
        "max_images_per_request": _int(1), "timeout": _via(parse_duration, positive=True),
        "allowed_dirs": _folders, "max_pixels": _int(1)}
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
    endpoints = _list_of(string, "host:port strings")(v)
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
    try:
        n_draft = _int(1, 64)(v.get("n_draft", 8))
    except Invalid as e:
        raise Invalid(f"n_draft: {e}") from None
    if draft == "ngram":
        if "p_min" in v:
            raise Invalid("p_min: applies to draft models; prompt lookup (draft_model: ngram) has no draft "
                          "probabilities")
        try:
            return {"draft_model": "ngram", "n_draft": n_draft, "ngram_size": _int(2, 8)(v.get("ngram_size", 3))}
        except Invalid as e:
            raise Invalid(f"ngram_size: {e}") from None
    if "ngram_size" in v:
        raise Invalid("ngram_size: applies to prompt lookup (draft_model: ngram), not to a draft model")
    p_min = v.get("p_min", 0.0)
    if isinstance(p_min, bool) or not isinstance(p_min, (int, float)) or not 0.0 <= p_min < 1.0:
        raise Invalid(f"p_min: expected a probability in [0, 1), got {p_min!r}")
    return {"draft_model": draft, "n_draft": n_draft, "p_min": float(p_min)}


def _at_most(check: Check, hi: float) -> Check:
    def bounded(v: Any) -> Any:
        value = check(v)
        if value > hi:
            raise Invalid(f"must be at most {hi:g}, got {value}")
        return value
    return bounded


# request fields a model entry may give defaults for (`sampling:`), with OpenAI's bounds; a request
# that sets a field itself keeps its value
SAMPLING_DEFAULTS: dict[str, Check] = {
    "temperature": _at_most(_float(), 2.0), "top_p": _at_most(_float(), 1.0), "top_k": _int(0),
    "min_p": _at_most(_float(), 1.0), "typical_p": _at_most(_float(), 1.0), "repeat_penalty": _float(),
    "presence_penalty": _at_most(_float(-2.0), 2.0), "frequency_penalty": _at_most(_float(-2.0), 2.0),
    "seed": _int(), "max_tokens": _int(1),
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


def suggest(word: Any, options: Any) -> str:
    """A " (did you mean 'x'?)" hint for a misspelt key or value, or ""."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


ROOT_KEYS: dict[str, Check] = {
    "host": string, "port": _int(1, 65535), "api_key": _optional(lambda v: str(v)),
    "default_model": _optional(string), "models_dir": _optional(string),
    "adapters_dir": _optional(_folders), "persist_adapters": _bool,
    "max_loaded_models": _optional(_int(1)), "memory_budget": _optional(_via(parse_size, positive=True)),
    "idle_unload": _optional(_via(parse_duration)), "parallel": _int(1), "max_queue": _int(0),
    "lora_steps_per_turn": _int(1), "kv_unified": _bool, "share_prefixes": _bool,
    "log_level": _choice(LOG_LEVELS), "cors": _cors, "cors_credentials": _bool, "max_body_bytes": _via(parse_size, positive=True),
    "shutdown_grace": _float(), "drain_delay": _via(parse_duration), "ready_requires_model": _bool,
    "web_ui": _bool, "unknown_model": _choice(UNKNOWN_MODEL_POLICIES), "metrics": _bool,
    "verbose_responses": _bool,
    "grammar_cache_size": _via(parse_size), "grammar_max_size": _via(parse_size, positive=True),
    "grammar_max_depth": _int(1), "grammar_timeout": _via(parse_duration, positive=True),
    "responses_store_size": _int(0), "media": _media,
}
LOAD_KEYS: dict[str, Check] = {      # the keys of llamacore.options.LOAD_KEYS
    "n_ctx": _int(0), "n_batch": _int(1), "n_ubatch": _int(1),
    "n_threads": _optional(_int(1)), "n_threads_batch": _optional(_int(1)),
    "n_gpu_layers": _int(-1), "main_gpu": _int(0), "split_mode": _choice(SPLIT_MODES),
    "tensor_split": _list_of(_float(), "numbers"), "use_mmap": _bool, "use_mlock": _bool,
    "flash_attn": _flash_attn,
    "type_k": _choice(KV_CACHE_TYPES), "type_v": _choice(KV_CACHE_TYPES), "offload_kqv": _bool,
    "rope_freq_base": _float(), "rope_freq_scale": _float(), "embedding": _bool,
    "pooling_type": _pooling, "kv_overrides": _kv_overrides, "rpc_servers": _rpc_servers,
    "seed": _int(),
}
ENTRY_KEYS: dict[str, Check] = {
    "alias": string, "model_alias": string, "aliases": _list_of(string, "strings"), "model": string,
    "clip_model_path": string, "mmproj": string,       # a vision projector (llama-cpp-python's / llama-server's name)
    "lora_adapters": lambda v: v,   # resolved against the config's folder in config.py
    "adapters": lambda v: v,        # likewise
    "chat_format": _optional(string), "chat_template": _optional(string),
    "chat_template_kwargs": _optional(_template_kwargs), "reasoning": _optional(_reasoning),
    "reasoning_format": _optional(_choice(REASONING_FORMATS)),
    "idle_unload": _optional(_via(parse_duration)), "parallel": _optional(_int(1)),
    "max_queue": _optional(_int(0)), "lora_steps_per_turn": _optional(_int(1)),
    "kv_unified": _optional(_bool), "share_prefixes": _optional(_bool), "speculative": _optional(_speculative),
    "json_whitespace": _optional(_choice(tuple(WHITESPACE))), "sampling": _optional(_sampling),
    "isolation": _optional(_choice(ISOLATION_MODES)), "step_timeout": _optional(_via(parse_duration, positive=True)),
    "max_rss": _optional(_via(parse_size, positive=True)), **LOAD_KEYS,
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
    value = _float(-math.inf)(v)
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
