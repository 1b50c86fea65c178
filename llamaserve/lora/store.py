"""The registry file of runtime adapters (`persist_adapters: true`): one per adapters_dir.

Each folder's file lists the runtime aliases whose adapter file was named in that folder, with
the path relative to it, so the folder can move. The server rewrites a file on every change,
atomically (a temporary file in the same folder, fsync, rename), so a crash leaves the old
list or the new one, never half of one. The server reads the files at startup; every entry
goes through the same checks as POST /admin/adapters again.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from llamaserve.config.adapters import REGISTRY_FILE

log = logging.getLogger(__name__)

_VERSION = 1


@dataclass(frozen=True)
class StoredAdapter:
    """One runtime alias as a registry file keeps it."""

    alias: str
    base: str          # the alias it was added on
    path: str          # relative to its adapters_dir
    scale: float


def read_stored(folder: Path) -> list[StoredAdapter]:
    """The runtime aliases kept in `folder`'s registry file (none if it has none); bad entries are logged."""
    path = folder / REGISTRY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.error("%s: cannot read the adapter registry (%s); its adapters are not restored", path, exc)
        return []
    items = data.get("adapters") if isinstance(data, dict) else None
    if not isinstance(items, list):
        log.error("%s: not an adapter registry (no adapters list); its adapters are not restored", path)
        return []
    out = []
    for i, item in enumerate(items):
        try:
            out.append(StoredAdapter(str(item["alias"]), str(item["base"]), str(item["path"]), float(item["scale"])))
        except (KeyError, TypeError, ValueError) as exc:
            log.error("%s: adapters[%d] is malformed (%s); skipped", path, i, exc)
    return out


def write_stored(folders: Sequence[Path], kept: Iterable[tuple[Path, StoredAdapter]]) -> None:
    """Rewrite the registry file of every folder with the (folder, adapter) pairs in `kept`.

    A folder whose list is empty gets an empty list (so removed adapters stay removed).
    Raises OSError when a file cannot be written; the files written before it stay.
    """
    by_folder: dict[Path, list[StoredAdapter]] = {folder: [] for folder in folders}
    for folder, item in kept:
        by_folder[folder].append(item)
    for folder, items in by_folder.items():
        target = folder / REGISTRY_FILE
        if not items and not target.exists():
            continue
        text = json.dumps({"version": _VERSION, "adapters": [vars(i) for i in items]}, indent=2) + "\n"
        _write_atomically(target, text)


def _write_atomically(target: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)       # the rename itself survives a crash
    finally:
        os.close(dir_fd)
