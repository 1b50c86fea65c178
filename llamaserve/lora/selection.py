"""Which adapters a generation request decodes with: its own set (by name or id) or its alias's.

A request's `lora_adapters` ({name: scale}) or llama.cpp-style `lora` ([{id, scale}]) replaces
the alias's default set for that request; names and ids resolve against the adapters loaded on
the request's base model (configured and runtime). Every problem is a 400 that says what is
loaded, before anything reaches the engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from llamacore.generation.kv_reuse import AdapterKey, adapter_key
from llamaserve.config.settings import ModelEntry
from llamaserve.errors import RequestError
from llamaserve.lora.catalog import Adapter, BaseAdapters


@dataclass(frozen=True)
class Selection:
    """The adapters a request decodes with (scale 0 left out) and the engine's key for that set."""

    adapters: tuple[tuple[Adapter, float], ...]

    @property
    def key(self) -> AdapterKey:
        return adapter_key((a.path, s) for a, s in self.adapters)

    @property
    def used(self) -> list[Adapter]:
        return [a for a, _ in self.adapters]


class AdapterRequest(Protocol):
    """What a request says of its adapters (the API schemas' AdapterFields): by name or by id."""

    @property
    def lora_adapters(self) -> Mapping[str, float] | None: ...

    @property
    def lora(self) -> Sequence[AdapterById] | None: ...


class AdapterById(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def scale(self) -> float: ...


def select_adapters(catalog: BaseAdapters, entry: ModelEntry, body: AdapterRequest) -> Selection:
    if body.lora_adapters is not None and body.lora is not None:
        raise RequestError("give either lora_adapters ({name: scale}) or lora ([{id, scale}]), not both",
                       param="lora_adapters")
    if body.lora_adapters is not None:
        chosen = [(_by_name(catalog, entry, name), scale, "lora_adapters")
                  for name, scale in body.lora_adapters.items()]
    elif body.lora is not None:
        chosen = [(_by_id(catalog, entry, item.id), item.scale, "lora") for item in body.lora]
    else:
        return Selection(tuple((_configured(catalog, p), s) for p, s in entry.lora_adapters if s != 0))
    seen: dict[int, Adapter] = {}
    for adapter, _, param in chosen:
        if adapter.id in seen:
            raise RequestError(f"adapter '{adapter.name}' (id {adapter.id}) is named twice in this request",
                           param=param)
        seen[adapter.id] = adapter
    return Selection(tuple((a, s) for a, s, _ in chosen if s != 0))


def _listing(catalog: BaseAdapters) -> str:
    adapters = catalog.listed()
    return ", ".join(f"{a.id} '{a.name}'" for a in adapters) if adapters else "none"


def _by_name(catalog: BaseAdapters, entry: ModelEntry, name: str) -> Adapter:
    adapter = catalog.by_name(name)
    if adapter is None:
        raise RequestError(f"adapter '{name[:100]}' is not loaded for model '{entry.alias}'; loaded adapters "
                            f"(id 'name'): {_listing(catalog)}", param="lora_adapters", code="adapter_not_found")
    return adapter


def _by_id(catalog: BaseAdapters, entry: ModelEntry, adapter_id: int) -> Adapter:
    adapter = catalog.by_id(adapter_id)
    if adapter is None:
        raise RequestError(f"adapter id {adapter_id} is not loaded for model '{entry.alias}'; loaded adapters "
                            f"(id 'name', as GET /lora-adapters lists them): {_listing(catalog)}", param="lora",
                       code="adapter_not_found")
    return adapter


def _configured(catalog: BaseAdapters, path: os.PathLike[str]) -> Adapter:
    adapter = catalog.by_path(os.fspath(path))
    assert adapter is not None, "every default adapter of an alias is in its base's catalogue"
    return adapter
