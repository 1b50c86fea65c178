"""What ``llamaserve check`` and ``--print-config`` print: a readable summary of a resolved config."""

from __future__ import annotations

import math

from llamaserve.config.parse import ServerConfig


def describe(config: ServerConfig) -> str:
    """A readable summary of a resolved config: what ``check`` and ``--print-config`` print."""
    server = (f"server: http://{config.host}:{config.port}  api key: {'set' if config.api_key else 'none'}  "
              f"log level: {config.log_level}  cors: {', '.join(config.cors_origins) or '-'}")
    default = config.default_entry()
    registry = (f"registry: default model: {default.alias if default else '-'}  "
                f"max loaded models: {config.max_loaded_models or '-'}  "
                f"memory budget: {_bytes(config.memory_budget)}  "
                f"idle unload: {_seconds(config.idle_unload)}  "
                f"parallel: {config.parallel}  max queue: {config.max_queue}  "
                f"kv cache: {'unified' if config.kv_unified else 'per sequence'}  "
                f"shared prefixes: {'on' if config.share_prefixes else 'off'}  "
                f"idle KV in host memory: {_bytes(config.cache_ram) if config.cache_ram else 'off'}")
    runtime = (f"runtime adapters: {', '.join(map(str, config.adapters_dirs))}  "
               f"persisted: {'yes' if config.persist_adapters else 'no'}" if config.adapters_dirs
               else "runtime adapters: off (no adapters_dir)")
    lines = [f"config: {config.source or 'command line'}", server, registry, runtime,
             f"models ({len(config.models)}):"]
    for entry in config.models:
        names = f"{entry.alias} (aliases: {', '.join(entry.aliases)})" if entry.aliases else entry.alias
        lines += [f"  {names}", f"    model: {entry.model}"]
        lines += [f"    lora: {path} (scale {scale:g})" for path, scale in entry.lora_adapters]
        lines += [f"    adapter: {path}" + (f" (name {name})" if name else "") for path, name in entry.adapters]
        if entry.load:
            lines.append("    load: " + ", ".join(f"{k}={v!r}" for k, v in entry.load.items()))
        template = entry.chat_template and str(entry.chat_template_file or "custom")
        extras = {"chat_format": entry.chat_format, "chat_template": template,
                  "idle_unload": entry.idle_unload and _seconds(entry.idle_unload),
                  "parallel": entry.parallel, "max_queue": entry.max_queue,
                  "kv_unified": entry.kv_unified, "share_prefixes": entry.share_prefixes,
                  "cache_ram": entry.cache_ram and _bytes(entry.cache_ram)}
        shown = [f"{key}={value}" for key, value in extras.items() if value is not None]
        if shown:
            lines.append("    " + ", ".join(shown))
        peers = [e.alias for e in config.models if e is not entry and e.base_key() == entry.base_key()]
        if peers:
            lines.append(f"    shares its loaded base model with: {', '.join(peers)}")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "never" if value is None or value == math.inf else f"{value:g}s"


def _bytes(size: int | None) -> str:
    if size is None:
        return "-"
    unit = max((u for u in range(5) if size >= 1024**u), default=0)
    return f"{size / 1024**unit:.4g} {['B', 'KiB', 'MiB', 'GiB', 'TiB'][unit]}"


__all__ = ["describe"]
