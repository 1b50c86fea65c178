"""Config checks of LoRA adapters: an entry's lora_adapters and adapters lists, each file's GGUF
type and architecture, adapter names per base model, and the adapters_dir folders.

Like every config check, these add problems instead of raising, so one pass reports them all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llamacore.gguf.check import adapter_mismatch
from llamaserve.config.checks import Problems, config_path, path_is, read_gguf
from llamaserve.config.keys import ADAPTER_ITEM_KEYS, scale
from llamaserve.config.settings import ModelEntry
from llamaserve.config.values import Invalid, string, suggest

# the file in an adapters_dir that keeps runtime adapters (persist_adapters: true)
REGISTRY_FILE = "llamaserve-adapters.json"


def adapter_name(path: Path) -> str:
    """The name an adapter file gets when the config gives none: its file stem."""
    return path.stem


def name_adapters(entries: Iterable[ModelEntry]) -> tuple[dict[Path, str], list[tuple[ModelEntry, str]]]:
    """The name of every adapter file that `entries` (aliases of one base) put on their base, and
    the conflicts found: (entry, message) for a file named twice or a name given to two files.

    A name given in an entry's `adapters` list wins over the file stem; the first one given wins
    over later ones (which are conflicts).
    """
    entries = list(entries)
    explicit: dict[Path, tuple[str, ModelEntry]] = {}
    conflicts: list[tuple[ModelEntry, str]] = []
    for entry in entries:
        for path, name in entry.adapters:
            if name is None:
                continue
            if path in explicit and explicit[path][0] != name:
                conflicts.append((entry, f"{path.name} is already named {explicit[path][0]!r} on this base model "
                                         f"(by {explicit[path][1].alias}); a file has one name per base"))
            else:
                explicit.setdefault(path, (name, entry))
    named: dict[Path, tuple[str, ModelEntry]] = {}          # in the order the config first mentions them
    for entry in entries:
        for path in entry.adapter_files():
            named.setdefault(path, explicit.get(path) or (adapter_name(path), entry))
    owner: dict[str, Path] = {}
    for path, (name, entry) in named.items():
        if name in owner:
            conflicts.append((entry, f"adapters {owner[name]} and {path} on one base model are both named "
                                     f"{name!r}; name one in adapters: [{{path: ..., name: ...}}]"))
        owner.setdefault(name, path)
    return {path: name for path, (name, _) in named.items()}, conflicts


def lora_adapters(value: Any, base_dir: Path, key: str, problems: Problems) -> tuple[tuple[Path, float], ...]:
    """``{path: scale}`` or ``[path, ...]`` (scale 1.0), as absolute paths."""
    if isinstance(value, list) and all(isinstance(p, str) and p for p in value):
        value = dict.fromkeys(value, 1.0)
    if not isinstance(value, dict):
        problems.add(key, f"expected a mapping of adapter paths to scales or a list of paths, got {value!r}")
        return ()
    adapters = []
    for path, factor in value.items():
        try:
            adapters.append((config_path(string(path), base_dir), scale(factor)))
        except Invalid as e:
            problems.add(f"{key}[{path!r}]", str(e))
    return tuple(adapters)


def check_adapter_file(path: Path, model: Path | None, arch: str | None, key: str, problems: Problems) -> None:
    """That ``path`` is a readable LoRA adapter GGUF for the model (its architecture ``arch`` and its
    weights' shapes, where ``model`` is a local file): else the model's first request would fail."""
    adapter = read_gguf(path, key, problems)
    if adapter is None:
        return
    if adapter.type != "adapter":
        kind = repr(adapter.type) if adapter.type else "not set"
        problems.add(key, f"{path.name} is not a LoRA adapter (general.type is {kind}, not 'adapter'): {path}")
    elif arch and adapter.architecture != arch:
        problems.add(key, f"adapter {path.name} is for architecture {adapter.architecture!r}, model is {arch!r}")
    elif arch and model is not None and (reason := adapter_mismatch(path, model)) is not None:
        problems.add(key, f"adapter {path.name} does not fit {model.name}: {reason}")


def adapter_list(value: Any, base_dir: Path, key: str, problems: Problems) -> tuple[tuple[Path, str | None], ...]:
    """An entry's ``adapters``: a list of paths or ``{path, name}`` mappings, as (absolute path, name)."""
    if not isinstance(value, list):
        problems.add(key, f"expected a list of adapter paths or {{path: ..., name: ...}} mappings, got {value!r}")
        return ()
    out: list[tuple[Path, str | None]] = []
    for i, item in enumerate(value):
        item = {"path": item} if isinstance(item, str) else item
        if not isinstance(item, dict):
            problems.add(f"{key}[{i}]", f"expected an adapter path or a {{path: ..., name: ...}} mapping, got {item!r}")
            continue
        for extra in item.keys() - set(ADAPTER_ITEM_KEYS):
            hint = suggest(extra, ADAPTER_ITEM_KEYS) or (
                " (adapters listed here apply only to requests that name them; use lora_adapters for "
                "ones every request of this alias gets)" if extra == "scale" else "")
            problems.add(f"{key}[{i}].{extra}", f"unknown key{hint}")
        try:
            path = config_path(string(item.get("path")), base_dir)
            name = None if item.get("name") is None else string(item["name"])
        except Invalid as e:
            problems.add(f"{key}[{i}]", f"path and name: {e}")
            continue
        out.append((path, name))
    return tuple(out)


def check_adapter_names(entries: list[tuple[str, ModelEntry]], problems: Problems) -> None:
    """Adapter names are per base model: one name per file, one file per name."""
    labels = {id(entry): label for label, entry in entries}
    bases: dict[tuple, list[ModelEntry]] = {}
    for _, entry in entries:
        bases.setdefault(entry.base_key(), []).append(entry)
    for siblings in bases.values():
        for entry, message in name_adapters(siblings)[1]:
            problems.add(f"{labels[id(entry)]}.adapters", message)


def resolve_adapters_dirs(value: list[str], persist: bool, base_dir: Path, problems: Problems) -> tuple[Path, ...]:
    """The adapters_dir folders with symlinks resolved (runtime adapter paths are checked against these)."""
    folders = []
    for i, text in enumerate(value):
        key = "adapters_dir" if len(value) == 1 else f"adapters_dir[{i}]"
        try:
            folder = Path(os.path.realpath(config_path(text, base_dir)))
        except ValueError:              # a NUL byte: no file system has such a name
            problems.add(key, f"not a valid path: {text!r}")
            continue
        if not path_is(folder, Path.is_dir):
            problems.add(key, f"not a directory: {folder}")
        elif persist and not os.access(folder, os.W_OK):
            problems.add(key, f"not writable, and persist_adapters: true keeps {REGISTRY_FILE} there: {folder}")
        else:
            folders.append(folder)
    if persist and not value:
        problems.add("persist_adapters", "needs adapters_dir (runtime adapters are kept in a file there)")
    return tuple(dict.fromkeys(folders))
