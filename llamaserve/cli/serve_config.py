"""The config a ``llamaserve`` command serves: flags merged over the config file, or the demo model.

Flags build the same raw settings a config file holds and go through ``parse_config``, so a
flag gets exactly the validation and messages that the equivalent config key gets.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path
from typing import Any

from llamaserve.cli.flags import UsageError
from llamaserve.config.hub import is_hub_ref
from llamaserve.config.parse import ServerConfig, parse_config, read_config_data

DEMO_MODEL = "stories260K.gguf"


def demo_config(args: argparse.Namespace) -> ServerConfig:
    """`llamaserve demo`: the model shipped in llamaserve/demo/ as "demo" (a file inside the
    installed package, so no download and no config file)."""
    model = Path(str(resources.files("llamaserve") / "demo" / DEMO_MODEL))
    data = {"host": args.host, "port": args.port, "models": [{"alias": "demo", "model": str(model)}]}
    return parse_config(data, None, Path.cwd())


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """Merge the flags over the config file (if any) and validate the result."""
    if not (args.config or args.model or args.models_dir):
        raise UsageError("nothing to serve: pass --config FILE, --model FILE or --models-dir DIR "
                         "(or set LLAMASERVE_CONFIG)")
    if not args.model and (args.alias or args.lora or args.lora_scaled):
        raise UsageError("--alias, --lora and --lora-scaled need --model")
    source = Path(args.config) if args.config else None
    data = read_config_data(source) if source else {}
    base_dir = source.absolute().parent if source else Path.cwd()
    flags = {"host": args.host, "port": args.port, "api_key": args.api_key, "parallel": args.parallel,
             "max_loaded_models": args.max_loaded_models, "idle_unload": args.idle_unload,
             "log_level": args.log_level, "models_dir": args.models_dir and _absolute(args.models_dir),
             "adapters_dir": [_absolute(d) for d in args.adapters_dir] or None,
             "persist_adapters": args.persist_adapters or None}
    data.update({key: value for key, value in flags.items() if value is not None})
    options = {"n_ctx": args.n_ctx, "n_gpu_layers": args.n_gpu_layers, "n_threads": args.threads,
               "chat_format": args.chat_format, "embedding": args.embedding or None, "isolation": args.isolation}
    options = {key: value for key, value in options.items() if value is not None}
    if args.model:
        entry: dict[str, Any] = {"model": args.model if is_hub_ref(args.model) else _absolute(args.model), **options}
        if args.alias:
            entry["alias"] = args.alias
        adapters = {_absolute(path): 1.0 for path in args.lora}
        adapters.update({_absolute(path): _scale(value) for path, value in args.lora_scaled})
        if adapters:
            entry["lora_adapters"] = adapters
        data["models"] = [entry]
    elif options:
        if isinstance(data.get("defaults", {}), dict):
            data["defaults"] = {**data.get("defaults", {}), **options}
        if isinstance(data.get("models"), list):
            data["models"] = [{**m, **options} if isinstance(m, dict) else m for m in data["models"]]
    return parse_config(data, source, base_dir)


def _absolute(path: str) -> str:
    """Flag paths are relative to the working directory, not to the config file."""
    return str(Path(path).expanduser().absolute())


def _scale(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--lora-scaled: SCALE must be a number, got {text!r}") from None


__all__ = ["DEMO_MODEL", "config_from_args", "demo_config"]
