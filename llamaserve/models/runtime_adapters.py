"""Aliases added and removed at runtime (POST/DELETE /admin/adapters): an adapter file on a base model.

An alias added here loads its file once onto the base (loading the base first if needed) and is
then served like a configured alias of that base whose `lora_adapters` is the one file at the
given scale; its name is also the adapter's name for per-request selection. A removal takes the
alias away at once; the file is freed once the last request that resolved it ends, unless
another name still uses it. With `persist_adapters: true` the aliases are kept in a registry
file per adapters_dir (llamaserve.lora.store) and restored at startup.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections import Counter
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from llamaserve.config.discovery import cached_header
from llamaserve.config.hub import local_path
from llamaserve.config.keys import MAX_SCALE
from llamaserve.config.settings import ModelEntry, ServerConfig
from llamaserve.errors import FieldError, NameConflictError, RegistryWriteError, UnknownModelError
from llamaserve.lora.catalog import Adapter, BaseAdapters, FoundAdapter, find_adapter_file
from llamaserve.lora.store import StoredAdapter, read_stored, write_stored
from llamaserve.models.loaded import Loaded
from llamaserve.runtime.metrics import Metrics

log = logging.getLogger(__name__)


class AliasRegistry(Protocol):
    """What runtime aliases need of the registry that holds them (llamaserve.models.registry.Registry):
    its config, names and adapter catalogs, a loaded base to put a file on, and the release of files."""

    config: ServerConfig
    metrics: Metrics
    catalogs: dict[tuple, BaseAdapters]

    def names(self) -> list[str]: ...

    def catalog(self, entry: ModelEntry) -> BaseAdapters: ...

    def base_alias(self, key: tuple) -> str: ...

    def use(self, entry: ModelEntry) -> AbstractAsyncContextManager[Loaded]: ...

    def release(self, key: tuple, adapter: Adapter) -> None: ...

    def release_file(self, key: tuple, path: str) -> None: ...


@dataclass(eq=False)
class RuntimeAlias:
    """An alias added at runtime: its entry (the base's, with this one adapter), where its file is."""

    entry: ModelEntry
    base: str                  # the configured alias it was added on
    adapter: Adapter
    scale: float
    found: FoundAdapter
    added_at: float            # wall-clock time

    def stored(self) -> StoredAdapter:
        return StoredAdapter(self.entry.alias, self.base, self.found.relative, self.scale)


class RuntimeAdapters:
    """The runtime aliases of one registry."""

    def __init__(self, registry: AliasRegistry) -> None:
        self.registry = registry
        self.aliases: dict[str, RuntimeAlias] = {}
        self._reserved: set[str] = set()            # aliases being added right now
        self._pending: Counter[tuple[tuple, str]] = Counter()   # (base key, file) being loaded for an add

    def entry(self, name: str) -> ModelEntry | None:
        rt = self.aliases.get(name)
        return rt.entry if rt is not None else None

    def pending(self, key: tuple) -> set[str]:
        """Files being loaded onto the base `key` for an add that has not finished: the base must keep them."""
        return {path for (k, path), n in self._pending.items() if k == key and n > 0}

    # -- checks ------------------------------------------------------------------------------

    def _check(self, alias: str, base: str, path: object,
               folders: tuple[Path, ...]) -> tuple[ModelEntry, FoundAdapter]:
        """The base entry and the adapter file for a new alias, or the error that refuses it."""
        registry = self.registry
        base_entry = registry.config.find(base)
        if base_entry is None and base in self.aliases:
            base_entry = registry.config.find(self.aliases[base].base)    # a runtime alias: its own base
        if base_entry is None:
            raise UnknownModelError(base, registry.names())
        if base_entry.load.get("embedding"):
            raise FieldError("base", f"model '{base}' is an embedding model; adapters apply to generation models")
        catalog = registry.catalog(base_entry)
        if alias in registry.names() or alias in self._reserved:
            raise NameConflictError(f"the name '{alias}' is already a model alias")
        if catalog.by_name(alias) is not None:
            raise NameConflictError(f"the name '{alias}' is already an adapter name on model '{base}'")
        found = find_adapter_file(path, folders)
        try:
            header = cached_header(found.real)
        except (OSError, ValueError) as exc:
            raise FieldError("path", f"{found.relative} is not a readable GGUF file: {exc}") from None
        if header.type != "adapter":
            raise FieldError("path", f"{found.relative} is not a LoRA adapter (general.type is "
                                     f"{header.type or 'not set'!r}, not 'adapter')")
        base_file = local_path(base_entry.model)       # None: a hub model not downloaded yet (llama.cpp checks)
        arch = cached_header(base_file).architecture if base_file is not None else header.architecture
        if header.architecture != arch:
            raise FieldError("path", f"adapter {found.relative} is for architecture {header.architecture!r}, "
                                     f"model '{base}' is {arch!r}")
        return base_entry, found

    def _entry(self, base_entry: ModelEntry, alias: str, found: FoundAdapter, scale: float) -> ModelEntry:
        return dataclasses.replace(base_entry, alias=alias, aliases=(), adapters=(),
                                   lora_adapters=((found.real, scale),))

    # -- add / remove ------------------------------------------------------------------------

    async def add(self, alias: str, base: str, path: object, scale: float) -> tuple[RuntimeAlias, float]:
        """Load the adapter at `path` (inside adapters_dir) onto `base` and serve it as `alias`.

        Returns the new alias and the seconds this call spent loading (about 0 when the file was
        on the base already). Errors: UnknownModelError (base), NameConflictError (alias),
        FieldError/UnsafePathError/FileNotFoundError (path; nothing is opened before it passes),
        FieldError (the file is not an adapter for this base), RegistryWriteError.
        """
        registry = self.registry
        base_entry, found = self._check(alias, base, path, registry.config.adapters_dirs)
        key, real = base_entry.base_key(), os.fspath(found.real)
        catalog = registry.catalogs[key]
        self._reserved.add(alias)
        self._pending[key, real] += 1
        try:
            async with registry.use(base_entry) as loaded:
                engine = loaded.engine
                assert engine is not None, "generation entries load an engine"
                fresh = real not in engine.adapters
                started = time.perf_counter()
                try:
                    await asyncio.to_thread(engine.add_adapter, real)
                except (OSError, ValueError) as exc:
                    registry.metrics.adapter_load_failures.labels(registry.base_alias(key), "runtime").inc()
                    raise FieldError("path", f"{found.relative} cannot be loaded onto model '{base}': {exc}") from None
                seconds = time.perf_counter() - started
                stored = StoredAdapter(alias, base_entry.alias, found.relative, scale)
                self._persist([*((r.found.folder, r.stored()) for r in self.aliases.values()),
                               (found.folder, stored)])
                adapter = catalog.add_name(real, alias)
                if fresh:
                    adapter.load_seconds, adapter.loaded_at, adapter.error = seconds, time.time(), None
                    registry.metrics.adapter_loads.labels(registry.base_alias(key), "runtime").inc()
                rt = RuntimeAlias(self._entry(base_entry, alias, found, scale), base_entry.alias, adapter, scale,
                                  found, time.time())
                self.aliases[alias] = rt
                log.info("added adapter alias %s (%s on %s) in %.3fs", alias, found.relative, base, seconds)
                return rt, seconds
        finally:
            self._reserved.discard(alias)
            self._pending[key, real] -= 1
            if not self._pending[key, real]:
                del self._pending[key, real]
            if catalog.by_path(real) is None:      # the add failed: free what it loaded
                registry.release_file(key, real)

    def remove(self, alias: str) -> RuntimeAlias:
        """Unregister a runtime alias now; its file is freed when the last request using it ends."""
        registry = self.registry
        rt = self.aliases.get(alias)
        if rt is None:
            if registry.config.find(alias) is not None:
                raise FieldError("alias", f"'{alias}' is configured in the config file; only aliases added at "
                                          "runtime can be removed here")
            raise UnknownModelError(alias, list(self.aliases), what=("runtime adapter alias", "runtime aliases"))
        self._persist([(r.found.folder, r.stored()) for r in self.aliases.values() if r is not rt])
        del self.aliases[alias]
        key = rt.entry.base_key()
        catalog = registry.catalogs[key]
        retired = catalog.remove_name(alias)
        if retired is not None:
            if retired.pins:
                catalog.draining.add(retired)
            else:
                registry.release(key, retired)
        registry.metrics.forget_model(alias)
        log.info("removed adapter alias %s", alias)
        return rt

    # -- persistence -------------------------------------------------------------------------

    def _persist(self, kept: list[tuple[Path, StoredAdapter]]) -> None:
        if self.registry.config.persist_adapters:
            try:
                write_stored(self.registry.config.adapters_dirs, kept)
            except OSError as exc:
                raise RegistryWriteError(f"the adapter registry file could not be written ({exc}); "
                                         "nothing was changed") from None

    def restore(self) -> None:
        """Register the aliases kept in each adapters_dir's registry file; they load with their base."""
        registry = self.registry
        for folder in registry.config.adapters_dirs:
            for item in read_stored(folder):
                try:
                    base_entry, found = self._check(item.alias, item.base, str(folder / item.path),
                                                    registry.config.adapters_dirs)
                    if not -MAX_SCALE <= item.scale <= MAX_SCALE:
                        raise ValueError(f"scale {item.scale} is outside [-{MAX_SCALE:g}, {MAX_SCALE:g}]")
                except (LookupError, ValueError, OSError, NameConflictError) as exc:
                    log.warning("%s: not restoring adapter alias %r: %s (it is dropped from the file at its "
                                "next write)", folder, item.alias, exc)
                    continue
                real = os.fspath(found.real)
                adapter = registry.catalog(base_entry).add_name(real, item.alias)
                self.aliases[item.alias] = RuntimeAlias(self._entry(base_entry, item.alias, found, item.scale),
                                                        base_entry.alias, adapter, item.scale, found, time.time())
                log.info("restored adapter alias %s (%s on %s)", item.alias, item.path, base_entry.alias)
