"""Server configuration: read YAML/TOML/JSON, validate everything, resolve model files.

A broken config must stop the server before it binds a port, with every problem reported at
once and each naming the file and the key, so users fix all of them in one pass. The result
is a `ServerConfig` of `ModelEntry`s (llamaserve.config.settings).
"""

from __future__ import annotations

import json
import logging
import os
import re
import tomllib
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from llamacore.gguf.check import vocabulary_mismatch
from llamacore.vision.media import MediaPolicy
from llamaserve.config.adapters import (
    adapter_list,
    check_adapter_file,
    check_adapter_names,
    lora_adapters,
    resolve_adapters_dirs,
)
from llamaserve.config.chat_templates import (
    LLAMA_CPP_TEMPLATE_NAMES,
    check_chat_formats,
    named_template,
    read_chat_template,
    without_template,
)
from llamaserve.config.checks import LINE_BREAKS, UNSAFE_IN_NAME, Problems, config_path, path_is, read_gguf
from llamaserve.config.discovery import discover
from llamaserve.config.exposure import check_exposure
from llamaserve.config.hub import HubFile, hub_ref, is_hub_ref
from llamaserve.config.keys import DEPRECATED_KEYS, ENTRY_KEYS, LOAD_KEYS, NAME_KEYS, ROOT_KEYS, kind_problems
from llamaserve.config.lcp import translate_lcp_config
from llamaserve.config.settings import ModelEntry, ServerConfig
from llamaserve.config.values import Check, EnvStr, Invalid, parse_duration, parse_size, suggest

__all__ = [
    "ConfigError", "ModelEntry", "ServerConfig", "load_config", "parse_config",
    "parse_duration", "parse_size", "read_config_data",
]

if TYPE_CHECKING:
    import yaml

log = logging.getLogger(__name__)

# ${VAR} or ${VAR:-default}; $${ is a literal ${ (a Jinja template, a password)
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# keys whose text is never interpolated: a chat template's own ${...} belongs to the template
_VERBATIM_KEYS = frozenset({"chat_template"})
_MAX_DEPTH = 64      # far beyond any real config; deeper data would overflow the recursive checks
_MAX_VALUES = 1_000_000


class ConfigError(Exception):
    """Every problem found in a config; ``str()`` gives one ``file: key: message`` per line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# -- reading ---------------------------------------------------------------------------------


def read_config_data(path: str | os.PathLike[str]) -> dict:
    """The raw mapping in a .yaml/.yml, .toml or .json file (no validation yet)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ConfigError([f"{path}: unsupported config type {suffix!r} (use .yaml, .yml, .toml or .json)"])
    try:
        if suffix == ".toml":
            with open(path, "rb") as f:
                data = tomllib.load(f)
        else:
            text = path.read_text(encoding="utf-8")
            if suffix == ".json":
                data = json.loads(text)
            else:
                import yaml  # only YAML configs need PyYAML
                try:
                    data = yaml.safe_load(text)
                except yaml.MarkedYAMLError as e:
                    raise ValueError(_yaml_problem(e)) from None
                except yaml.YAMLError as e:
                    raise ValueError(f"invalid YAML: {e}") from None
    except FileNotFoundError:
        raise ConfigError([f"{path}: file not found"]) from None
    except json.JSONDecodeError as e:
        raise ConfigError([f"{path}: line {e.lineno}, column {e.colno}: invalid JSON: {e.msg}"]) from None
    except tomllib.TOMLDecodeError as e:  # its message ends with "(at line L, column C)"
        raise ConfigError([f"{path}: invalid TOML: {e}".translate(LINE_BREAKS)]) from None
    except (OSError, ValueError) as e:
        raise ConfigError([f"{path}: {e}".translate(LINE_BREAKS)]) from None
    except RecursionError:              # thousands of nested [ or {: every parser recurses
        raise ConfigError([f"{path}: nested more than {_MAX_DEPTH} levels deep"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping at the top level, got {type(data).__name__}"])
    return data


def _yaml_problem(error: yaml.MarkedYAMLError) -> str:
    """PyYAML's own text names the input "<unicode string>" and quotes it over several lines; the
    caller names the file, so this gives the line and column of the problem, on one line."""
    def at(mark: yaml.Mark | None, prefix: str = "", suffix: str = "") -> str:
        return f"{prefix}line {mark.line + 1}, column {mark.column + 1}{suffix}" if mark else ""

    context = f" ({error.context}{at(error.context_mark, ' at ')})" if error.context else ""
    return f"{at(error.problem_mark, suffix=': ')}invalid YAML: {error.problem or 'unreadable'}{context}"


def load_config(path: str | os.PathLike[str]) -> ServerConfig:
    """Read, validate and resolve a config file; relative paths are relative to its folder."""
    path = Path(path)
    return parse_config(read_config_data(path), path, path.absolute().parent)


# -- parsing ---------------------------------------------------------------------------------


def parse_config(data: dict, source: Path | None, base_dir: Path) -> ServerConfig:
    """Validate ``data`` (as read from ``source``) into a ServerConfig or raise ConfigError.

    Strings get ${VAR} / ${VAR:-default} interpolation; relative paths resolve against
    ``base_dir``; ``defaults`` is merged into every model entry (the entry wins).
    """
    problems = Problems(str(source) if source else "<command line>")
    if not isinstance(data, dict):
        raise ConfigError([f"{problems.label}: expected a mapping at the top level"])
    shape = _shape_problem(data)
    if shape:
        raise ConfigError([f"{problems.label}: {shape}"])
    data = _interpolate(data, "", problems)
    data = translate_lcp_config(data, problems)    # llama-cpp-python's server config keys in ours
    settings = _fields(data, ROOT_KEYS, "", problems, allowed=(*ROOT_KEYS, "defaults", "models"))

    raw_defaults = _mapping(data.get("defaults"), "defaults", problems)
    defaults = _fields(raw_defaults, ENTRY_KEYS, "defaults.", problems)
    for key in NAME_KEYS:
        if key in defaults:
            problems.add(f"defaults.{key}", "not allowed in defaults (every model needs its own names)")
            defaults.pop(key)
    raw_models = data.get("models") or []
    if not isinstance(raw_models, list):
        problems.add("models", f"expected a list of model entries, got {raw_models!r}")
        raw_models = []
    found: list[tuple[str, ModelEntry] | None] = []     # None: the entry had problems
    for i, item in enumerate(raw_models):
        raw = _mapping(item, f"models[{i}]", problems)
        fields = _fields(raw, ENTRY_KEYS, f"models[{i}].", problems)
        if "model" not in raw or "model" in fields:   # else its bad value is reported already
            found.append(_entry(f"models[{i}]", {**without_template(defaults, fields), **fields}, base_dir,
                                problems))

    models_dir = config_path(settings["models_dir"], base_dir) if settings.get("models_dir") else None
    if models_dir is not None and not path_is(models_dir, Path.is_dir):
        problems.add("models_dir", f"not a directory: {models_dir}")
    elif models_dir is not None:
        taken = {name for e in found if e for name in e[1].names()}
        found += [_entry(f"models_dir[{path.name}]",
                         {**defaults, "alias": alias, "model": str(path), **({"embedding": True} if embedder else {})},
                         base_dir, problems) for alias, path, embedder in discover(models_dir) if alias not in taken]
    entries = [e for e in found if e]
    _check_names(entries, settings.get("default_model"), problems)
    check_adapter_names(entries, problems)
    check_chat_formats(entries, problems)
    adapters_dirs = resolve_adapters_dirs(settings.pop("adapters_dir", None) or [],
                                          settings.get("persist_adapters", False), base_dir, problems)
    if not raw_models and not entries:
        problems.add("models", "no models configured (add a models list, or a models_dir with GGUF models)")
    check_exposure(data, settings, problems)
    if problems:
        raise ConfigError(list(problems))

    settings["media"] = _media_policy(settings.pop("media", None) or {}, base_dir)
    settings.update(models_dir=models_dir, adapters_dirs=adapters_dirs, cors_origins=settings.pop("cors", ()),
                    api_key=settings.get("api_key") or None, admin_key=settings.get("admin_key") or None,
                    allowed_hosts=tuple(settings["allowed_hosts"]) if "allowed_hosts" in settings else None,
                    models=tuple(e for _, e in entries),
                    source=Path(os.path.normpath(source.absolute())) if source else None)
    return ServerConfig(**settings)


def _shape_problem(data: Any) -> str | None:
    """Why ``data`` is too deep or too big to check, or None (iterative: any input is safe).

    Counts values as the checks see them: a YAML alias counts again each time it is used.
    """
    count, todo = 0, [(data, 1)]
    while todo:
        value, depth = todo.pop()
        count += 1
        if count > _MAX_VALUES:
            return f"more than {_MAX_VALUES} values (counting every use of a YAML alias)"
        if isinstance(value, (dict, list)):
            if depth > _MAX_DEPTH:
                return f"nested more than {_MAX_DEPTH} levels deep"
            todo.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return None


def _interpolate(value: Any, key: str, problems: Problems) -> Any:
    if isinstance(value, dict):
        return {_interpolate(k, _join(key, k), problems): _interpolate(v, _join(key, k), problems)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{key}[{i}]", problems) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value or key.rpartition(".")[2] in _VERBATIM_KEYS:
        return value

    def substitute(match: re.Match) -> str:
        if match[0] == "$${":
            return "${"
        name, default = match[1], match[2]
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return default
        problems.add(key, f"environment variable {name} is not set (use ${{{name}:-default}} for a fallback)")
        return ""
    return EnvStr(_ENV_REF.sub(substitute, value))


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _mapping(value: Any, key: str, problems: Problems) -> dict:
    if value is None or isinstance(value, dict):
        return value or {}
    problems.add(key, f"expected a mapping, got {value!r}")
    return {}


def _fields(raw: dict, spec: dict[str, Check], prefix: str, problems: Problems,
            allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Check every key of ``raw`` against ``spec``; unknown keys get a did-you-mean."""
    allowed = allowed or tuple(spec)
    clean = {}
    for key, value in raw.items():
        if key not in allowed:
            problems.add(f"{prefix}{key}", f"unknown key{suggest(key, allowed)}")
        elif key in spec:
            try:
                checked = spec[key](value)
            except Invalid as e:
                problems.add(f"{prefix}{key}", str(e))
                continue
            if key in DEPRECATED_KEYS:
                log.warning("%s: %s%s is deprecated and has no effect: %s", problems.label, prefix, key,
                            DEPRECATED_KEYS[key])
            else:
                clean[key] = checked
    return clean


def _entry(label: str, raw: dict, base_dir: Path, problems: Problems) -> tuple[str, ModelEntry] | None:
    """Build one entry from its merged keys, checking its files; None when it cannot be built."""
    if "model" not in raw:
        problems.add(f"{label}.model", "required (the path of a GGUF model file)")
        return None
    if "alias" in raw and "model_alias" in raw:
        problems.add(f"{label}.model_alias", "give either alias or model_alias, not both")
    for key, message in kind_problems(raw):
        problems.add(f"{label}.{key}", message)
    if raw.get("rpc_servers") and raw.get("isolation") == "thread":
        problems.add(f"{label}.rpc_servers", "needs isolation: process (llama.cpp ends the process it runs in "
                                             "when an RPC worker goes away; a worker process contains that)")
    model: Path | HubFile | None
    if is_hub_ref(raw["model"]):            # fetched on first load: its architecture is not known yet
        model, arch = hub_ref(raw["model"], f"{label}.model", problems), None
    else:
        model = config_path(raw["model"], base_dir)
        arch = _model_architecture(model, f"{label}.model", problems)
    projector = _projector(label, raw, base_dir, problems)
    adapters = lora_adapters(raw.get("lora_adapters", {}), base_dir, f"{label}.lora_adapters", problems)
    declared = adapter_list(raw.get("adapters", []), base_dir, f"{label}.adapters", problems)
    local = model if isinstance(model, Path) and arch else None    # a readable local file: its header is known
    for key, listed in (("lora_adapters", adapters), ("adapters", declared)):
        for path, _ in listed:
            check_adapter_file(path, local, arch, f"{label}.{key}", problems)
    if model is None:
        return None
    template, template_file = read_chat_template(label, raw, base_dir, problems)
    alias = raw.get("alias") or raw.get("model_alias") or (
        model.default_alias() if isinstance(model, HubFile) else model.name.removesuffix(".gguf"))
    aliases = tuple(dict.fromkeys(a for a in raw.get("aliases", ()) if a != alias))
    entry = ModelEntry(
        alias=alias, aliases=aliases, model=model, lora_adapters=adapters, adapters=declared,
        load=MappingProxyType({k: raw[k] for k in LOAD_KEYS if k in raw}),
        chat_format=raw.get("chat_format") or named_template(label, template, problems),
        chat_template=None if template in LLAMA_CPP_TEMPLATE_NAMES else template, chat_template_file=template_file,
        chat_template_kwargs=MappingProxyType(dict(raw.get("chat_template_kwargs") or {})),
        reasoning=raw.get("reasoning") or "auto", reasoning_format=raw.get("reasoning_format") or "auto",
        idle_unload=raw.get("idle_unload"), parallel=raw.get("parallel"), max_queue=raw.get("max_queue"),
        kv_unified=raw.get("kv_unified"), share_prefixes=raw.get("share_prefixes"), cache_ram=raw.get("cache_ram"),
        speculative=_speculative(label, raw.get("speculative"), local, base_dir, problems),
        json_whitespace=raw.get("json_whitespace"),
        isolation=raw.get("isolation") or ("process" if raw.get("rpc_servers") else None),
        step_timeout=raw.get("step_timeout"), max_rss=raw.get("max_rss"),
        sampling=MappingProxyType(dict(raw.get("sampling") or {})), clip_model_path=projector,
    )
    return label, entry


def _speculative(label: str, settings: dict | None, model: Path | None, base_dir: Path,
                 problems: Problems) -> dict | None:
    """The checked speculative settings, a draft model's path resolved and checked as a model file
    with the vocabulary of ``model`` (the local model file, if readable): else the first request would fail."""
    if not settings or settings["draft_model"] == "ngram":
        return settings
    path = config_path(settings["draft_model"], base_dir)
    key = f"{label}.speculative.draft_model"
    if (_model_architecture(path, key, problems) is not None and model is not None
            and (reason := vocabulary_mismatch(path, model)) is not None):
        problems.add(key, f"draft model {path.name} cannot draft for {model.name}: {reason}")
    return {**settings, "draft_model": str(path)}


def _projector(label: str, raw: dict, base_dir: Path, problems: Problems) -> Path | HubFile | None:
    """The entry's vision projector file (clip_model_path, or its alias mmproj), checked."""
    if "clip_model_path" in raw and "mmproj" in raw:
        problems.add(f"{label}.mmproj", "give either clip_model_path or mmproj, not both")
    key = "clip_model_path" if "clip_model_path" in raw else "mmproj"
    if key not in raw:
        return None
    if raw.get("embedding"):
        problems.add(f"{label}.{key}", "applies only to generation models (embedding models take no images)")
    if is_hub_ref(raw[key]):
        return hub_ref(raw[key], f"{label}.{key}", problems, quant_ok=False)
    path = config_path(raw[key], base_dir)
    header = read_gguf(path, f"{label}.{key}", problems)
    if header is not None and header.type not in ("mmproj", None):
        problems.add(f"{label}.{key}", f"{path.name} is not a multimodal projector (general.type is {header.type!r})")
    return path


def _media_policy(raw: dict[str, Any], base_dir: Path) -> MediaPolicy:
    dirs = tuple(str(config_path(d, base_dir)) for d in raw.get("allowed_dirs", ()))
    names = {"max_images_per_request": "max_images"}
    fields = {names.get(k, k): v for k, v in raw.items() if k != "allowed_dirs"}
    if "remote_allow" in fields:
        fields["remote_allow"] = tuple(fields["remote_allow"])
    return MediaPolicy(**fields, allowed_dirs=dirs)


def _model_architecture(model: Path, key: str, problems: Problems) -> str | None:
    header = read_gguf(model, key, problems)
    if header is None:
        return None
    if header.type in ("adapter", "mmproj"):
        what = "a LoRA adapter" if header.type == "adapter" else "a multimodal projector"
        problems.add(key, f"{model.name} is {what}, not a model (general.type is {header.type!r})")
        return None
    return header.architecture


def _check_names(entries: list[tuple[str, ModelEntry]], default_model: str | None,
                 problems: Problems) -> None:
    owner: dict[str, str] = {}
    for label, entry in entries:
        for i, name in enumerate(entry.names()):
            key = f"{label}.alias" if i == 0 else f"{label}.aliases[{i - 1}]"
            if UNSAFE_IN_NAME.search(name):
                problems.add(key, f"{name!r} holds a control character or a line separator (names are logged)")
            if name in owner and owner[name] != label:
                problems.add(key, f"duplicate alias {name!r} (also {owner[name]})")
            owner.setdefault(name, label)
    if default_model is not None and default_model not in owner:
        problems.add("default_model", f"no model named {default_model!r}{suggest(default_model, owner)}")
