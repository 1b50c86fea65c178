"""The adapters of each base model: their names and ids, what they served, and where runtime ones may live.

Every adapter file loaded on a base has one record there (`Adapter`), whether the config
declares it (an alias's `lora_adapters` or an entry's `adapters` list) or an admin added it at
runtime; a file is loaded once per base whatever the number of names and aliases that use it.
Requests name adapters by name (`lora_adapters`) or by id (llama.cpp's `lora`); ids are never
reused while the server runs, so an id a client read from /lora-adapters cannot come to mean
another adapter after a removal.

`find_adapter_file` is the one gate a client-supplied adapter path goes through: the path must
resolve (symlinks followed) to a regular file inside a configured `adapters_dir`, and nothing is
opened before that holds.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from llamaserve.config.adapters import name_adapters
from llamaserve.config.settings import ModelEntry
from llamaserve.errors import FieldError, UnsafePathError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")      # http:, file:, hf:, s3:, ...
MAX_PATH_CHARS = 4096


@dataclass(eq=False)
class Adapter:
    """One adapter file on one base model: its id and names there, its load, and what it served."""

    id: int
    path: str                      # the file; the engine's key for it
    names: list[str]               # its name first, then further names (runtime aliases) using the file
    configured: bool               # declared in the config: stays for the server's lifetime
    size: int                      # bytes of the file: its tensors, held in memory while loaded
    load_seconds: float | None = None
    loaded_at: float | None = None     # wall-clock time of its last load
    error: str | None = None           # why its last load failed, if it did
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    pins: int = 0                      # requests that resolved it and have not ended
    labels: set[str] = field(default_factory=set)    # names its metric series carry

    @property
    def name(self) -> str:
        return self.names[0]


class BaseAdapters:
    """The adapters of one base model, looked up by name, id or file."""

    def __init__(self, entries: Iterable[ModelEntry]) -> None:
        self._by_id: dict[int, Adapter] = {}
        self._by_name: dict[str, Adapter] = {}
        self._by_path: dict[str, Adapter] = {}
        self.draining: set[Adapter] = set()     # removed, but requests that resolved them still run
        self._next_id = 0
        names, _ = name_adapters(entries)
        for path, name in names.items():
            self._new(os.fspath(path), name, configured=True)

    def _new(self, path: str, name: str, configured: bool) -> Adapter:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        adapter = Adapter(self._next_id, path, [name], configured, size)
        self._next_id += 1
        self._by_id[adapter.id] = self._by_name[name] = self._by_path[path] = adapter
        return adapter

    def listed(self) -> list[Adapter]:
        return sorted(self._by_id.values(), key=lambda a: a.id)

    def names(self) -> list[str]:
        return [a.name for a in self.listed()]

    def by_name(self, name: str) -> Adapter | None:
        return self._by_name.get(name)

    def by_id(self, adapter_id: int) -> Adapter | None:
        return self._by_id.get(adapter_id)

    def by_path(self, path: str) -> Adapter | None:
        return self._by_path.get(path)

    def needed_paths(self) -> set[str]:
        """Files the engine must hold: every listed adapter and those still draining."""
        return set(self._by_path) | {a.path for a in self.draining}

    def add_name(self, path: str, name: str) -> Adapter:
        """Give the file at `path` the further name `name`, recording the file first if it is new."""
        adapter = self._by_path.get(path)
        if adapter is None:
            return self._new(path, name, configured=False)
        adapter.names.append(name)
        self._by_name[name] = adapter
        return adapter

    def remove_name(self, name: str) -> Adapter | None:
        """Drop a runtime name; returns its adapter when nothing names it any more (it is then unlisted)."""
        adapter = self._by_name.pop(name)
        adapter.names.remove(name)
        if adapter.names or adapter.configured:
            return None
        del self._by_id[adapter.id], self._by_path[adapter.path]
        return adapter


# -- runtime adapter paths -------------------------------------------------------------------


@dataclass(frozen=True)
class FoundAdapter:
    """A client-named adapter file that passed `find_adapter_file`."""

    real: Path        # the file with every symlink resolved: the only path ever opened
    folder: Path      # the adapters_dir it was named in
    relative: str     # its path inside `folder` as named (what a registry file stores)


def _inside(path: Path, folders: Sequence[Path]) -> bool:
    return any(path.is_relative_to(folder) for folder in folders)


def find_adapter_file(text: object, folders: Sequence[Path]) -> FoundAdapter:
    """The adapter file a client names, or an error; `folders` are the resolved adapters_dir folders.

    Raises FieldError (not a path: a URL, a NUL byte, not a regular file), UnsafePathError (runtime
    adapters are off, `..`, or a path that is or resolves outside every folder) or FileNotFoundError.
    Only lstat/readlink/stat touch the file system before the answer: nothing is opened.
    """
    if not folders:
        raise UnsafePathError("runtime adapters are disabled: set adapters_dir in the server's config")
    if not isinstance(text, str) or not text.strip():
        raise FieldError("path", "expected a non-empty string")
    if "\0" in text or len(text) > MAX_PATH_CHARS:
        raise FieldError("path", "not a usable file path (NUL byte, or too long)")
    if _URL.match(text):
        raise FieldError("path", f"{text[:100]!r} is a URL; give a file path inside adapters_dir")
    if ".." in PurePosixPath(text).parts:
        raise UnsafePathError("'..' is not allowed in an adapter path; give a path inside adapters_dir")
    given = Path(os.path.normpath(text))
    if given.is_absolute():
        candidates = [(folder, given) for folder in folders if given.is_relative_to(folder)]
        if not candidates:
            raise UnsafePathError(f"{text[:200]!r} is outside every adapters_dir")
    else:
        candidates = [(folder, folder / given) for folder in folders]
    for folder, candidate in candidates:
        if not os.path.lexists(candidate):
            continue
        real = Path(os.path.realpath(candidate))
        if not _inside(real, folders):
            raise UnsafePathError(f"{text[:200]!r} resolves outside adapters_dir (a symlink points out)")
        mode = os.stat(real).st_mode          # FileNotFoundError for a dangling link inside
        if not stat.S_ISREG(mode):
            raise FieldError("path", f"{text[:200]!r} is not a regular file")
        return FoundAdapter(real, folder, os.path.relpath(candidate, folder))
    raise FileNotFoundError(f"no adapter file {text[:200]!r} in adapters_dir")


def still_inside(path: str, folders: Sequence[Path]) -> bool:
    """Whether a runtime adapter's file is still itself (no symlink now) inside an adapters_dir.

    Checked again before a base reloads its runtime adapters: the folder may have changed since.
    """
    return os.path.realpath(path) == path and _inside(Path(path), folders)
