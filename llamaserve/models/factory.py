"""Building what serves a base model: an Engine in this process, or one in a worker process.

`isolation: thread` runs the engine on a thread of the server process (what `Llama` means in
a script); `isolation: process` runs it in a worker process of its own (llamaserve.worker.child), so a
crash, hang or leak of that model ends only that process. Both have the same interface.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from llamacore import Llama
from llamacore.gguf.header import DEFAULT_KEYS
from llamacore.gguf.load_options import CONTEXT_KEYS, MODEL_KEYS
from llamaserve.config.discovery import cached_header
from llamaserve.config.hub import local_files
from llamaserve.config.keys import DEFAULT_ISOLATION
from llamaserve.config.settings import ModelEntry, ServerConfig
from llamaserve.engine.client import EngineClient
from llamaserve.engine.engine import Engine
from llamaserve.engine.speculative import drafter_spec
from llamaserve.runtime.logs import request_id
from llamaserve.worker.client import WorkerEmbedder, WorkerEngine
from llamaserve.worker.process import WorkerProcess

DEFAULT_STEP_TIMEOUT = 120.0     # seconds a worker may go without finishing an engine step while it has work
DEFAULT_N_CTX = 2048             # each sequence's context when the entry sets none, at most the training context

log = logging.getLogger(__name__)

OnCrash = Callable[[WorkerProcess], None]


def isolation(entry: ModelEntry) -> str:
    return entry.isolation or DEFAULT_ISOLATION


def _worker_spec(model: Path, config: ServerConfig, label: str) -> dict[str, Any]:
    """What every worker gets besides its model's options: how to log, and for whom it loads."""
    return {"model": os.fspath(model), "log_level": config.log_level, "label": label,
            "request_id": request_id.get()}


class Supervision(NamedTuple):
    """Where a worker's frames are handled (the server's event loop), and who hears of its crash."""

    loop: asyncio.AbstractEventLoop | None
    on_crash: OnCrash


def _worker_options(entry: ModelEntry, label: str, watch: Supervision) -> dict[str, Any]:
    assert watch.loop is not None, "a worker process is started from a thread of a running event loop"
    return {"label": label, "loop": watch.loop, "on_crash": watch.on_crash, "max_rss": entry.max_rss,
            "step_timeout": entry.step_timeout or DEFAULT_STEP_TIMEOUT}


def build_engine(entry: ModelEntry, config: ServerConfig, label: str, watch: Supervision) -> EngineClient:
    """The engine for a generation entry (not started); hub files are fetched first."""
    model, projector_file = local_files(entry.model, entry.clip_model_path)
    params: dict[str, Any] = dict(entry.load)
    n_ctx_train = _trained_context(model)
    n_ctx = params.get("n_ctx", min(DEFAULT_N_CTX, n_ctx_train or DEFAULT_N_CTX))
    _warn_beyond_training(label, n_ctx, n_ctx_train)
    options = {
        "parallel": _either(entry.parallel, config.parallel),
        "max_queue": _either(entry.max_queue, config.max_queue),
        "kv_unified": _either(entry.kv_unified, config.kv_unified),
        "share_prefixes": _either(entry.share_prefixes, config.share_prefixes),
        "cache_ram": _either(entry.cache_ram, config.cache_ram),
        "n_ctx": n_ctx,
        "seed": params.get("seed"),     # config rejects pooling_type for generation entries
        "model_kwargs": {k: v for k, v in params.items() if k in MODEL_KEYS},
        "context_kwargs": {k: v for k, v in params.items() if k in CONTEXT_KEYS},
    }
    speculative = dict(entry.speculative) if entry.speculative else None
    projector = os.fspath(projector_file) if projector_file else None
    if isolation(entry) == "process":
        spec = {**options, **_worker_spec(model, config, label), "speculative": speculative, "projector": projector}
        return WorkerEngine(spec, **_worker_options(entry, label, watch))
    drafter = drafter_spec(speculative, model) if speculative else None
    return Engine(os.fspath(model), [], speculative=drafter, projector_path=projector, **options)


def build_embedder(entry: ModelEntry, config: ServerConfig, label: str, watch: Supervision) -> Llama | WorkerEmbedder:
    """The embedder for an embedding entry (`embedding: true`); a hub file is fetched first."""
    model, _ = local_files(entry.model, entry.clip_model_path)
    params = {k: v for k, v in entry.load.items() if k != "embedding"}
    _warn_beyond_training(label, params.get("n_ctx", 0), _trained_context(model))
    if isolation(entry) == "process":
        spec = {**_worker_spec(model, config, label), "llama_kwargs": params}
        return WorkerEmbedder(spec, **_worker_options(entry, label, watch))
    # every load key but seed (config rejects it for embedding entries) is a Llama keyword
    return Llama(model, embedding=True, **params)


def _trained_context(model: Path) -> int | None:
    """The context the model was trained on (`<arch>.context_length`), from its GGUF header alone;
    None when it does not say (llama.cpp's load reports an unreadable file)."""
    try:
        key = f"{cached_header(model).architecture}.context_length"
        value = cached_header(model, DEFAULT_KEYS | {key}).metadata.get(key)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _warn_beyond_training(label: str, n_ctx: int, n_ctx_train: int | None) -> None:
    """Our own line for a context past training: llama.cpp's compares its whole KV pool instead
    (llamaserve.runtime.logs.PooledContext), which says nothing about one sequence."""
    if n_ctx_train and n_ctx > n_ctx_train:
        log.warning("model %s: n_ctx %d is beyond the %d tokens the model was trained on (n_ctx_train); answers past "
                    "them may degrade unless RoPE scaling is set for it", label, n_ctx, n_ctx_train)


def _either(own: Any, default: Any) -> Any:
    """A model entry's own setting, or the server-wide one when the entry leaves it unset."""
    return default if own is None else own


__all__ = ["DEFAULT_ISOLATION", "DEFAULT_STEP_TIMEOUT", "Supervision", "build_embedder", "build_engine",
           "isolation"]
