"""The resolved configuration the server runs on: a `ServerConfig` and its `ModelEntry`s.

`llamaserve.config.parse` builds these from a config file (or the CLI) after validating every key;
everything downstream (registry, routes) reads only these frozen objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from llamacore.vision.media import MediaPolicy
from llamaserve.config.hub import HubFile


@dataclass(frozen=True)
class ModelEntry:
    """One servable name (plus extra names): a base model file, its load options and adapters.

    `lora_adapters` apply to every request for this alias (unless the request names its own set);
    `adapters` are loaded onto the base too but apply only to requests that name them. Each
    adapter file's name (for requests and /lora-adapters) is the one given in `adapters`, else
    its file stem.
    """

    alias: str
    aliases: tuple[str, ...]
    model: Path | HubFile                   # a hub file is fetched when the model first loads
    lora_adapters: tuple[tuple[Path, float], ...] = ()
    adapters: tuple[tuple[Path, str | None], ...] = ()      # (file, name or None for its stem)
    load: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    chat_format: str | None = None
    chat_template: str | None = None
    chat_template_file: Path | None = None     # where chat_template was read from, if a file
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    reasoning: str = "auto"                 # llama-server's --reasoning: on, off, auto (the template decides)
    reasoning_format: str = "auto"          # none, auto, deepseek, deepseek-legacy (llamacore.chat.reasoning)
    idle_unload: float | None = None
    parallel: int | None = None
    max_queue: int | None = None
    kv_unified: bool | None = None
    share_prefixes: bool | None = None
    cache_ram: int | None = None
    speculative: Mapping[str, int] | None = field(default=None, hash=False)   # prompt lookup: n_draft, ngram_size
    json_whitespace: str | None = None      # whitespace in structured output (json_grammar.WHITESPACE)
    isolation: str | None = None            # "thread" (in the server process) or "process" (a worker each)
    step_timeout: float | None = None       # process isolation: seconds without progress before a kill
    max_rss: int | None = None              # process isolation: the worker's memory limit in bytes
    sampling: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)  # request defaults
    clip_model_path: Path | HubFile | None = None   # a vision projector (mmproj GGUF): image_url parts in chat

    def names(self) -> tuple[str, ...]:
        return (self.alias, *self.aliases)

    def adapter_files(self) -> tuple[Path, ...]:
        """Every adapter file this entry puts on its base, applied by default or not."""
        return tuple(dict.fromkeys([p for p, _ in self.lora_adapters] + [p for p, _ in self.adapters]))

    def base_key(self) -> tuple:
        """Entries with equal keys share one loaded base model (and hot-swap their adapters)."""
        return (str(self.model), _hashable(self.load), self.isolation, self.step_timeout, self.max_rss,
                str(self.clip_model_path))


@dataclass(frozen=True)
class ServerConfig:
    """Everything the server needs; idle_unload None (or inf) means never unload."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    admin_key: str | None = None            # the key of the admin routes; None: api_key opens them too
    # Host headers served without an api_key (DNS rebinding); None: loopback names and `host`; "*": any
    allowed_hosts: tuple[str, ...] | None = None
    require_api_key: bool = False           # refuse to start on a non-loopback address without api_key
    default_model: str | None = None
    models_dir: Path | None = None
    adapters_dirs: tuple[Path, ...] = ()    # where runtime adapters (POST /admin/adapters) may live
    persist_adapters: bool = False          # keep runtime adapters across restarts (a file per folder)
    max_loaded_models: int | None = None
    memory_budget: int | None = None
    idle_unload: float | None = 300
    parallel: int = 4
    max_queue: int = 64
    kv_unified: bool = True
    share_prefixes: bool = True
    cache_ram: int = 2 * 1024**3       # bytes of idle sequences' KV kept in host memory (0: kept in the KV cache)
    log_level: str = "info"
    cors_origins: tuple[str, ...] = ()
    cors_credentials: bool = False          # CORS answers allow credentials (with "*": echo the Origin)
    max_body_bytes: int = 4 * 1024 * 1024
    send_timeout: float = 60.0              # a connection whose client reads nothing this long is dropped
    shutdown_grace: float = 10.0
    drain_delay: float = 0.0                # after SIGTERM: seconds /ready answers 503 while serving on
    ready_requires_model: bool = False      # /ready only once the default model is loaded (loaded at start)
    unknown_model: str | None = None        # "error" | "default"; None: "default" when one model is configured
    verbose_responses: bool = False         # chat answers carry llama-server's `__verbose` (the prompt as tokenized)
    metrics: bool = True                    # GET /metrics (off: 501, as llama-server without --metrics)
    web_ui: bool = True                     # the chat page at / (llamaserve/static/chat.html)
    grammar_cache_size: int = 32 * 1024 * 1024    # bytes of compiled response_format grammars kept
    grammar_max_size: int = 2 * 1024 * 1024       # largest grammar a schema may compile to
    grammar_max_depth: int = 64                   # deepest schema nesting
    grammar_timeout: float = 2.0                  # seconds a schema may take to compile
    grammar_work_limit: int = 20_000_000          # stack steps of one grammar operation (vendor patch 0017)
    responses_store_size: int = 1000              # /v1/responses kept for previous_response_id (0: none)
    responses_store_bytes: int = 256 * 1024 * 1024     # what they may weigh together (as JSON)
    media: MediaPolicy = MediaPolicy()            # where images in requests may come from, and their limits
    models: tuple[ModelEntry, ...] = ()
    source: Path | None = None

    def find(self, name: str) -> ModelEntry | None:
        return next((m for m in self.models if name in m.names()), None)

    def fallback_entry(self) -> ModelEntry | None:
        """The entry for a name nothing matches: the default model under `unknown_model: default`."""
        policy = self.unknown_model or ("default" if len(self.models) == 1 and self.models_dir is None else "error")
        return self.default_entry() if policy == "default" else None

    def default_entry(self) -> ModelEntry | None:
        """`default_model`, else the first generation model: a request that names no model is far more
        often a chat than an embedding, and a folder's embedder may well sort first."""
        if self.default_model is not None:
            return self.find(self.default_model)
        return next((m for m in self.models if not m.load.get("embedding")), self.models[0] if self.models else None)


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    return value
