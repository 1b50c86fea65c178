"""Model-folder discovery: which GGUF files in a folder are servable models, adapters or unreadable.

Used by `models_dir:` in a config and by `llamaserve init-config`; decisions come from the GGUF
headers alone (nothing is loaded). Headers are cached by file identity, since many config
entries usually share one base file.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from llamacore.gguf.header import DEFAULT_KEYS, GGUFHeader, read_header

log = logging.getLogger(__name__)

_SPLIT_PART = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$")


@dataclass(frozen=True)
class ModelsDirScan:
    """What a folder of GGUF files holds: servable models (alias, first file), adapters, junk."""

    models: tuple[tuple[str, Path, str | None], ...]   # (alias, file, architecture)
    adapters: tuple[tuple[Path, str | None], ...]      # (file, architecture)
    unreadable: tuple[tuple[Path, str], ...]        # (file, reason)
    embedders: frozenset[Path] = frozenset()            # the models that are embedding models
    projectors: tuple[tuple[Path, Path], ...] = ()      # (model, the mmproj file paired with it)


def scan_models_dir(directory: Path) -> ModelsDirScan:
    """Classify ``directory/*.gguf`` (not recursive) from their headers alone.

    Skipped as models: LoRA adapters, multimodal projectors (mmproj* or clip), and parts 2..N
    of split models (the first part, named without its -0000N-of-0000M suffix, stands for all).
    """
    models, adapters, unreadable, mmprojs = [], [], [], []
    for path in sorted(p for p in directory.glob("*.gguf") if p.is_file()):
        split = _SPLIT_PART.match(path.name)
        if split and int(split["part"]) > 1:
            continue
        try:
            header = cached_header(path)
        except (OSError, ValueError) as e:
            unreadable.append((path, str(e)))
            continue
        if header.type == "adapter":
            adapters.append((path, header.architecture))
        elif path.name.lower().startswith("mmproj") or header.type == "mmproj" or header.architecture == "clip":
            mmprojs.append(path)
        else:
            models.append((split["stem"] if split else path.stem, path, header.architecture))
    embedders = frozenset(path for _, path, arch in models if is_embedding_model(path, arch))
    generators = [path for _, path, _ in models if path not in embedders]
    return ModelsDirScan(tuple(models), tuple(adapters), tuple(unreadable), embedders,
                         pair_projectors(generators, mmprojs))


_NAME_NOISE = re.compile(r"mmproj|model|[-_.]?(?:f16|f32|bf16|q\d(?:_[0-9a-z]+)*|iq\d\w*)(?=$|[-_.])|[-_.]")


def pair_projectors(models: list[Path], mmprojs: list[Path]) -> tuple[tuple[Path, Path], ...]:
    """Each model with the projector whose file name shares the longest run of its own name
    (mmproj-llava-v1.5-7b-f16 goes with llava-v1.5-7b-Q4_K_M); with one model and one projector,
    those two. A model no name matches (4+ characters in common) gets none."""
    if len(models) == 1 and len(mmprojs) == 1:
        return ((models[0], mmprojs[0]),)
    pairs = []
    for model in models:
        name = _NAME_NOISE.sub("", model.stem.lower())
        best = max(((_common_run(name, _NAME_NOISE.sub("", p.stem.lower())), p) for p in mmprojs),
                   default=(0, None), key=lambda scored: scored[0])
        if best[1] is not None and best[0] >= 4:
            pairs.append((model, best[1]))
    return tuple(pairs)


def _common_run(a: str, b: str) -> int:
    """The length of the longest substring of both."""
    best = 0
    for i in range(len(a)):
        for j in range(len(b)):
            k = 0
            while i + k < len(a) and j + k < len(b) and a[i + k] == b[j + k]:
                k += 1
            best = max(best, k)
    return best


# encoder architectures llama.cpp only runs for embeddings (or reranking)
EMBEDDING_ARCHITECTURES = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
                                     "modern-bert", "neo-bert", "gemma-embedding"})


def is_embedding_model(path: Path, architecture: str | None) -> bool:
    """An encoder of the BERT family, or a model whose metadata sets a pooling type (embedders
    converted from decoder models, such as Qwen3-Embedding, carry ``<arch>.pooling_type``)."""
    if architecture is None:
        return False
    if architecture in EMBEDDING_ARCHITECTURES:
        return True
    try:
        key = f"{architecture}.pooling_type"
        pooling = cached_header(path, DEFAULT_KEYS | {key}).metadata.get(key)
    except (OSError, ValueError):
        return False
    return isinstance(pooling, int) and pooling > 0


def cached_header(path: Path, keys: frozenset[str] = DEFAULT_KEYS) -> GGUFHeader:
    """The header of `path` (with `keys`), read once per (path, mtime, size, keys)."""
    stat = path.stat()
    return _read_header(str(path), stat.st_mtime_ns, stat.st_size, keys)


@lru_cache(maxsize=256)
def _read_header(path: str, mtime_ns: int, size: int, keys: frozenset[str]) -> GGUFHeader:
    return read_header(path, keys)


def discover(models_dir: Path) -> list[tuple[str, Path, bool]]:
    """(alias, file, is an embedding model) of every model in `models_dir`; unreadable files are
    logged and skipped."""
    scan = scan_models_dir(models_dir)
    for path, reason in scan.unreadable:
        log.warning("models_dir: skipping %s: %s", path, reason)
    return [(alias, path, path in scan.embedders) for alias, path, _ in scan.models]
