"""`Llama.from_pretrained`: a GGUF file (and companions) from a Hugging Face Hub repository.

As llama-cpp-python does it: each file name is a glob that must match exactly one file of the
repository, downloaded with huggingface_hub (its own cache, its progress bars). Beyond theirs:
a split model (``NAME-00001-of-00003.gguf``) comes with all its shards, since llama.cpp loads the
rest from the first shard's folder; and offline (``HF_HUB_OFFLINE=1``) the globs resolve against
the cached snapshot of the repository, so a populated cache needs no network at all (theirs
lists the repository first, which offline mode forbids).
"""

from __future__ import annotations

import fnmatch
import inspect
import json
import os
import re
import socket
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["download", "split_shards"]

_CONNECT_TIMEOUT = 5.0      # seconds for the Hub to take a connection (it takes one in well under 1 s)

# llama.cpp's names for the files of a split model (llama_split_path): PREFIX-00001-of-00003.gguf
_SHARD = re.compile(r"(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")


def download(repo_id: str, filename: str | None, additional_files: list | None = None,
             local_dir: str | os.PathLike[str] | None = None, local_dir_use_symlinks: bool | str = "auto",
             cache_dir: str | os.PathLike[str] | None = None, *, top_level_only: bool = False) -> str:
    """The local path of the file `filename` names in `repo_id`, downloaded unless cached, and of
    its first shard when it is a split model (every shard is fetched). Each glob of
    `additional_files` is fetched too. `top_level_only` ignores files in subfolders, as
    llama-cpp-python's chat handlers do. Needs `huggingface-hub`."""
    try:
        from huggingface_hub import HfApi, constants, hf_hub_download
        from huggingface_hub.utils import validate_repo_id
    except ImportError as exc:
        raise ImportError("Llama.from_pretrained requires the huggingface-hub package: "
                          "pip install huggingface-hub (or llamacore[hub])") from exc
    validate_repo_id(repo_id)
    options: dict[str, Any] = {"local_dir": local_dir, "cache_dir": cache_dir}
    if "local_dir_use_symlinks" in inspect.signature(hf_hub_download).parameters:
        options["local_dir_use_symlinks"] = local_dir_use_symlinks
    elif local_dir_use_symlinks != "auto":
        raise ValueError("local_dir_use_symlinks: this huggingface-hub version no longer takes it "
                         "(local_dir always holds real files); leave it 'auto'")
    patterns = [filename, *(additional_files or [])]
    offline = bool(constants.HF_HUB_OFFLINE)
    if not offline:
        _check_reachable(constants.ENDPOINT, f"{repo_id}/{filename}")
    files = _cached_files(repo_id, patterns, local_dir, cache_dir) if offline else HfApi().list_repo_files(repo_id)
    if top_level_only:
        files = [f for f in files if "/" not in f]
    chosen = [_choose(repo_id, pattern, files, offline) for pattern in patterns]
    paths = {name: hf_hub_download(repo_id=repo_id, filename=name, **options)
             for name in dict.fromkeys(name for names in chosen for name in names)}
    return paths[chosen[0][0]]


def _check_reachable(endpoint: str, what: str) -> None:
    """Fail in seconds, naming `what`, where the Hub (or the proxy to it) takes no connection:
    huggingface_hub retries for some 20 s and then names only the URL it asked for."""
    url = urlsplit(endpoint)
    host = url.hostname or ""
    proxy = None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(url.scheme)
    target = urlsplit(proxy if "://" in proxy else f"http://{proxy}") if proxy else url
    try:
        socket.create_connection((target.hostname or host, target.port or (443 if target.scheme == "https" else 80)),
                                 timeout=_CONNECT_TIMEOUT).close()
    except OSError as exc:
        through = f" through the proxy {proxy}" if proxy else ""
        raise ConnectionError(f"{what}: cannot reach the Hugging Face Hub at {endpoint}{through} ({exc}); download "
                              "the file and give its local path, or set HF_HUB_OFFLINE=1 to use the copy in the "
                              "Hugging Face cache") from None


def split_shards(name: str) -> list[str] | None:
    """Every shard's name when `name` is one shard of a split model, first shard first; else None."""
    m = _SHARD.fullmatch(name)
    if m is None:
        return None
    return [f"{m['prefix']}-{no:05d}-of-{m['count']}.gguf" for no in range(1, int(m["count"]) + 1)]


def _cached_files(repo_id: str, patterns: list[str | None], local_dir: str | os.PathLike[str] | None,
                  cache_dir: str | os.PathLike[str] | None) -> list[str]:
    """The repository's files in the local snapshot (the cache's for refs/main, or `local_dir`),
    found without the network. huggingface_hub refuses a snapshot whose cached tree listing
    names files matching `patterns` that are missing."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.utils import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, cache_dir=_str(cache_dir), local_dir=_str(local_dir),
                                        local_files_only=True, allow_patterns=[p for p in patterns if p]))
    except LocalEntryNotFoundError as exc:
        where = local_dir if local_dir is not None else (cache_dir or constants.HF_HUB_CACHE)
        raise FileNotFoundError(f"{repo_id}: HF_HUB_OFFLINE is set, and {where} lacks what is asked for "
                                f"(download it once online, or unset HF_HUB_OFFLINE): {exc}") from exc
    files = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())
    return sorted(f for f in files if not f.startswith(".cache/"))      # local_dir's download metadata


def _str(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None else os.fspath(path)


def _choose(repo_id: str, pattern: str | None, files: list[str], offline: bool) -> list[str]:
    """The files to fetch for `pattern`: the one file it matches, or every shard of the one split
    model it matches (its first shard first)."""
    matches = [f for f in files if fnmatch.fnmatch(f, pattern or "")]
    shards = split_shards(matches[0]) if matches else None
    if shards is not None and set(matches) <= set(shards):
        missing = [s for s in shards if s not in files]
        if missing:
            raise ValueError(f"{matches[0]} is one shard of a split model, but {repo_id} "
                             f"{'has no cached' if offline else 'lacks'} {json.dumps(missing)}")
        return shards
    if len(matches) != 1:
        how = "No file found" if not matches else "Multiple files found"
        listed = "Files cached (HF_HUB_OFFLINE is set)" if offline else "Available Files"
        raise ValueError(f"{how} in {repo_id} matching {pattern}\n\n{listed}:\n{json.dumps(files)}")
    return matches
