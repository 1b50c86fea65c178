"""Which models are loaded: lazy loading, shared bases for LoRA aliases, idle unloading, LRU eviction.

Aliases whose model file and load parameters are equal share one loaded base (an Engine with
the union of their adapters); a request for an alias only selects its adapter scales. A model
loads on the first request that needs it (concurrent first requests wait on one load), is never
evicted while it serves a request, and unloads after `idle_unload` seconds without use.

Each base has a catalogue of its adapters (llamaserve.lora.catalog); runtime aliases
(llamaserve.models.runtime_adapters) add to it, and a base that reloads after an idle unload loads
every adapter its catalogue holds before it serves again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from llamaserve.config.hub import local_path
from llamaserve.config.settings import ModelEntry, ServerConfig
from llamaserve.errors import CapacityError, ModelFailedError, ModelLoadError, UnknownModelError, WorkerCrashedError
from llamaserve.lora.catalog import Adapter, BaseAdapters, still_inside
from llamaserve.models.crashes import CrashRecord
from llamaserve.models.factory import Supervision, build_embedder, build_engine, isolation
from llamaserve.models.loaded import Loaded
from llamaserve.models.runtime_adapters import RuntimeAdapters
from llamaserve.runtime.logs import loading_model
from llamaserve.runtime.memory import collect_and_trim, release_code_pages
from llamaserve.runtime.metrics import Metrics
from llamaserve.worker.forks import fork_server
from llamaserve.worker.process import WorkerProcess

log = logging.getLogger(__name__)


class Registry:
    def __init__(self, config: ServerConfig, metrics: Metrics) -> None:
        self.config = config
        self.metrics = metrics
        self.loaded: dict[tuple, Loaded] = {}
        self._locks: dict[tuple, asyncio.Lock] = {}
        self._loading = asyncio.Lock()        # one load at a time, so limits hold across models
        self._changed = asyncio.Condition()
        self._idle_task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self.crashes: dict[tuple, CrashRecord] = {}       # per base: its worker processes' crashes
        self._background: set[asyncio.Task] = set()     # loads and starts nobody awaits
        bases: dict[tuple, list[ModelEntry]] = {}
        for e in config.models:
            bases.setdefault(e.base_key(), []).append(e)
        self.bases = bases
        self.catalogs = {key: BaseAdapters(entries) for key, entries in bases.items()}
        self.runtime = RuntimeAdapters(self)
        if config.persist_adapters:
            self.runtime.restore()

    # -- lookup ------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return [n for e in self.config.models for n in e.names()] + list(self.runtime.aliases)

    def entry(self, name: str | None, fallback: bool = False) -> ModelEntry:
        """The entry for a model name (None = default). Names are never paths. With `fallback` (a
        request's model field), a name nothing matches gets the default model under `unknown_model: default`."""
        entry = self.config.default_entry() if not name else self.config.find(name) or self.runtime.entry(name)
        if entry is None and name and fallback:
            entry = self.config.fallback_entry()
        if entry is None:
            raise UnknownModelError(name or "", self.names())
        return entry

    def entries(self) -> list[ModelEntry]:
        """Every servable entry: the config's, then the runtime aliases in the order they were added."""
        return [*self.config.models, *(rt.entry for rt in self.runtime.aliases.values())]

    def state(self, entry: ModelEntry) -> Loaded | None:
        return self.loaded.get(entry.base_key())

    def catalog(self, entry: ModelEntry) -> BaseAdapters:
        """The adapters of `entry`'s base model."""
        return self.catalogs[entry.base_key()]

    def base_alias(self, key: tuple) -> str:
        """The name that stands for a base model: its first alias without default adapters, else its first."""
        entries = self.bases[key]
        return next((e.alias for e in entries if not e.lora_adapters), entries[0].alias)

    def parent(self, entry: ModelEntry) -> str | None:
        """For an alias with default adapters, the alias of its base without them (as vLLM lists LoRA models)."""
        if not entry.lora_adapters:
            return None
        plain = next((e.alias for e in self.bases[entry.base_key()] if not e.lora_adapters), None)
        added = self.runtime.aliases.get(entry.alias)
        return plain or (added.base if added is not None else None)

    # -- adapters in use ---------------------------------------------------------------------

    def pin(self, adapters: list[Adapter]) -> None:
        """Keep `adapters` on their base until `unpin`: a removal frees them only after that."""
        for adapter in adapters:
            adapter.pins += 1

    def unpin(self, entry: ModelEntry, adapters: list[Adapter]) -> None:
        catalog = self.catalog(entry)
        for adapter in adapters:
            adapter.pins -= 1
            if adapter.pins == 0 and adapter in catalog.draining:
                catalog.draining.discard(adapter)
                self.release(entry.base_key(), adapter)

    def record_usage(self, entry: ModelEntry, adapters: list[Adapter], n_prompt: int, n_completion: int) -> None:
        """Count one finished request and its tokens for each adapter it decoded with."""
        base = self.base_alias(entry.base_key())
        for adapter in adapters:
            adapter.requests += 1
            adapter.prompt_tokens += n_prompt
            adapter.completion_tokens += n_completion
            adapter.labels.add(adapter.name)
            self.metrics.adapter_requests.labels(base, adapter.name).inc()
            self.metrics.adapter_prompt_tokens.labels(base, adapter.name).inc(n_prompt)
            self.metrics.adapter_completion_tokens.labels(base, adapter.name).inc(n_completion)

    def needed(self, key: tuple) -> set[str]:
        """Adapter files the base `key` must hold: its catalogue's, draining ones, ones being added."""
        return self.catalogs[key].needed_paths() | self.runtime.pending(key)

    def release(self, key: tuple, adapter: Adapter) -> None:
        """An adapter left the catalogue and no request holds it: free it and its metric series."""
        self.release_file(key, adapter.path)
        self.metrics.forget_adapter(self.base_alias(key), adapter.labels)

    def release_file(self, key: tuple, path: str) -> None:
        """Free the adapter file `path` from the loaded base `key`, unless something still needs it."""
        loaded = self.loaded.get(key)
        if path not in self.needed(key) and loaded is not None and loaded.engine is not None \
                and path in loaded.engine.adapters:
            loaded.engine.remove_adapter(path)      # its running requests finish first
            self.metrics.adapter_unloads.labels(self.base_alias(key), "removed").inc()

    # -- use ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def use(self, entry: ModelEntry) -> AsyncIterator[Loaded]:
        """The loaded base for `entry`, loading it first if needed; pinned while in use."""
        loaded = await self.load(entry)
        loaded.in_use += 1
        loaded.last_used = time.monotonic()
        try:
            yield loaded
        finally:
            loaded.in_use -= 1
            loaded.last_used = time.monotonic()
            async with self._changed:
                self._changed.notify_all()

    async def load(self, entry: ModelEntry) -> Loaded:
        key = entry.base_key()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key in self.loaded:
                return self.loaded[key]
            record = self.crashes.get(key)
            wait = record.retry_after() if record is not None else None
            if record is not None and wait is not None:
                raise ModelFailedError(
                    f"model '{entry.alias}' is failed after {record.crashes} crashes (last: its worker process "
                    f"{record.last_reason}); the next load is in {wait:.0f} s", wait)
            async with self._loading:
                return await self._load_locked(entry, key)

    async def _load_locked(self, entry: ModelEntry, key: tuple) -> Loaded:
        await self._make_room(entry)
        siblings = self.bases[key]
        catalog = self.catalogs[key]
        configured = {a.path for a in catalog.listed() if a.configured}
        plan = [(path, path in configured) for path in sorted(catalog.needed_paths())]
        started = time.monotonic()
        outcomes: list[tuple[str, float | None, str | None]] = []
        self._loop = asyncio.get_running_loop()
        try:
            loaded = await asyncio.to_thread(self._load_blocking, key, siblings, plan, outcomes)
        except Exception as exc:
            if isinstance(exc, WorkerCrashedError):       # the worker died while loading
                self._record_crash(key, str(exc), exc.cause)
            self.metrics.load_failures.labels(entry.alias).inc()
            log.error("loading %s failed: %s", entry.alias, exc)
            raise ModelLoadError(f"model '{entry.alias}' failed to load: {exc}") from exc
        loaded.load_seconds = time.monotonic() - started
        self.loaded[key] = loaded
        self.metrics.loads.labels(entry.alias).inc()
        self.metrics.loaded_models.set(len(self.loaded))
        self._record_adapter_loads(key, loaded, outcomes, configured)
        record = self.crashes.get(key)
        if record is not None and record.pending_restart:
            record.pending_restart = False
            record.restarts += 1
            self.metrics.worker_restarts.labels(self.base_alias(key)).inc()
            await asyncio.to_thread(collect_and_trim)     # what the crashed instance left
        log.info("loaded %s in %.2fs", entry.alias, loaded.load_seconds)
        return loaded

    # -- worker crashes ----------------------------------------------------------------------

    def _record_crash(self, key: tuple, reason: str, cause: str) -> CrashRecord:
        record = self.crashes.setdefault(key, CrashRecord())
        record.crashed(reason, cause)
        record.pending_restart = True
        self.metrics.worker_crashes.labels(self.base_alias(key), cause).inc()
        return record

    def _worker_crashed(self, loaded: Loaded, worker: WorkerProcess) -> None:
        """A loaded base's worker died (its requests have failed): forget it and load it again
        at once, unless it is failed (crashed too often), in which case requests get 503s."""
        record = self._record_crash(loaded.key, worker.crash_reason or "stopped", worker.crash_cause or "exit")
        if self.loaded.get(loaded.key) is not loaded:
            return
        del self.loaded[loaded.key]
        self.metrics.llamacpp.retire(loaded.engine)
        self.metrics.unloads.labels(loaded.entries[0].alias, "crashed").inc()
        self.metrics.loaded_models.set(len(self.loaded))
        asyncio.get_running_loop().run_in_executor(None, loaded.close_crashed)
        if record.retry_after() is None and not self._closing:
            self._in_background(self._load_logged(loaded.entries[0]))
        else:
            log.error("model %s is failed after %d crashes; next load in %.0f s", self.base_alias(loaded.key),
                      record.crashes, record.retry_after() or 0)

    def _in_background(self, work: Any) -> None:
        """Run the coroutine `work` as a task the registry keeps until it ends (and cancels on close)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def default_loaded(self) -> bool:
        entry = self.config.default_entry()
        return entry is not None and self.state(entry) is not None

    def preload_default(self) -> None:
        """Load the default model now, in the background (ready_requires_model)."""
        entry = self.config.default_entry()
        if entry is not None:
            self._in_background(self._load_logged(entry))

    async def _load_logged(self, entry: ModelEntry) -> None:
        try:
            await self.load(entry)
        except Exception as exc:        # the load's own error is logged and counted there
            log.error("loading %s in the background failed: %s", entry.alias, exc)

    def _record_adapter_loads(self, key: tuple, loaded: Loaded, outcomes: list[tuple[str, float | None, str | None]],
                              configured: set[str]) -> None:
        """Note each adapter's load on its record, then free what was removed while the base loaded."""
        catalog, base = self.catalogs[key], self.base_alias(key)
        for path, seconds, error in outcomes:
            source = "config" if path in configured else "runtime"
            holders = [a for a in (catalog.by_path(path), *catalog.draining) if a is not None and a.path == path]
            for adapter in holders:
                adapter.load_seconds, adapter.error = seconds, error
                adapter.loaded_at = time.time() if error is None else None
            if error is None:
                self.metrics.adapter_loads.labels(base, source).inc()
            else:
                self.metrics.adapter_load_failures.labels(base, source).inc()
                log.error("adapter %s did not load onto %s: %s", path, base, error)
        if loaded.engine is not None:
            for path in set(loaded.engine.adapters) - self.needed(key):
                self.release_file(key, path)

    def _load_blocking(self, key: tuple, siblings: list[ModelEntry], plan: list[tuple[str, bool]] | None = None,
                       outcomes: list[tuple[str, float | None, str | None]] | None = None) -> Loaded:
        """Load the base and then each adapter of `plan` (path, configured), timing each into `outcomes`.

        A configured adapter that fails fails the load; a runtime one is noted and skipped (its
        requests get the reason), and so is one whose file has left adapters_dir since it was added.
        """
        entry = siblings[0]
        loading_model.set(", ".join(e.alias for e in siblings))   # this thread's copy of the context
        loaded = Loaded(key=key, entries=siblings)
        label = self.base_alias(key)
        watch = Supervision(self._loop, lambda worker: self._worker_crashed(loaded, worker))
        if entry.load.get("embedding", False):
            loaded.embedder = build_embedder(entry, self.config, label, watch)
            return loaded
        engine = build_engine(entry, self.config, label, watch)
        outcomes = [] if outcomes is None else outcomes
        try:
            for path, configured in plan or []:
                started = time.perf_counter()
                try:
                    if not configured and not still_inside(path, self.config.adapters_dirs):
                        raise ValueError("the file is no longer inside adapters_dir")
                    engine.add_adapter(path)        # the worker has not started: loads here
                except (OSError, ValueError) as exc:
                    if configured:
                        raise
                    outcomes.append((path, None, str(exc)))
                    continue
                outcomes.append((path, time.perf_counter() - started, None))
        except BaseException:
            engine.close()
            raise
        loaded.engine = engine.start()
        return loaded

    async def _make_room(self, entry: ModelEntry) -> None:
        """Evict least-recently-used idle bases until the new one fits the count and memory limits."""
        limit, budget = self.config.max_loaded_models, self.config.memory_budget
        model = local_path(entry.model)        # None: a hub model not downloaded yet
        need = os.path.getsize(model) if model is not None and os.path.exists(model) else 0
        deadline = time.monotonic() + 120
        while True:
            over_count = limit is not None and len(self.loaded) >= limit
            over_memory = budget is not None and self.loaded and (
                sum(m.memory_bytes() for m in self.loaded.values()) + need > budget)
            if not (over_count or over_memory):
                return
            idle = sorted((m for m in self.loaded.values() if not m.busy()), key=lambda m: m.last_used)
            if idle:
                await self.unload(idle[0], reason="evicted")
                continue
            if time.monotonic() > deadline:
                raise CapacityError("all loaded models are busy; try again shortly")
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=1.0)
                except TimeoutError:
                    pass

    async def unload(self, loaded: Loaded, reason: str = "unloaded") -> None:
        if self.loaded.get(loaded.key) is not loaded:
            return
        del self.loaded[loaded.key]
        n_adapters = len(loaded.engine.adapters) if loaded.engine is not None else 0
        self.metrics.llamacpp.retire(loaded.engine)      # its counts stay in the llamacpp:* totals
        await asyncio.to_thread(loaded.close)
        if reason == "idle" and not self.loaded:     # (an eviction has a load right behind it)
            release_code_pages()
        self.metrics.unloads.labels(loaded.entries[0].alias, reason).inc()
        if n_adapters:
            self.metrics.adapter_unloads.labels(self.base_alias(loaded.key), reason).inc(n_adapters)
        self.metrics.loaded_models.set(len(self.loaded))
        log.info("%s %s", reason, loaded.entries[0].alias)

    # -- idle unloading ----------------------------------------------------------------------

    def idle_limit(self, loaded: Loaded) -> float | None:
        limits = [e.idle_unload for e in loaded.entries if e.idle_unload is not None]
        return max(limits) if limits else self.config.idle_unload

    async def unload_idle(self) -> None:
        now = time.monotonic()
        default = self.config.default_entry() if self.config.ready_requires_model else None
        for loaded in list(self.loaded.values()):
            if default is not None and loaded.key == default.base_key():
                continue                  # /ready depends on it
            limit = self.idle_limit(loaded)
            if limit is not None and limit >= 0 and not loaded.busy() and now - loaded.last_used >= limit:
                await self.unload(loaded, reason="idle")

    def start(self) -> None:
        if any(isolation(e) == "process" for e in self.config.models):
            # imports llamacore once, now, so that the first worker forks in milliseconds
            self._in_background(asyncio.to_thread(fork_server))

        async def loop() -> None:
            while True:
                await asyncio.sleep(0.5)
                await self.unload_idle()
        self._idle_task = asyncio.get_running_loop().create_task(loop())

    async def close(self) -> None:
        self._closing = True
        if self._idle_task is not None:
            self._idle_task.cancel()
        for task in list(self._background):
            task.cancel()
        for loaded in list(self.loaded.values()):
            await self.unload(loaded, reason="shutdown")
