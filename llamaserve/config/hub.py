"""Model files from the Hugging Face Hub: ``model: hf://owner/repo/file-glob.gguf`` (and the same
for ``clip_model_path``/``mmproj``), fetched when the model first loads.

The config check validates only the reference (syntax, repository id, huggingface-hub
installed): a server starts without the network, and a model nobody asks for is never
downloaded. Loading fetches the file with `llamacore.gguf.hub.download` (huggingface_hub's
cache, progress bars on stderr; with HF_HUB_OFFLINE=1 the cache alone) in the thread that loads
the model, before any worker process starts, so both isolation modes load a local path.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from llamacore.gguf.hub import download
from llamaserve.config.checks import Problems

__all__ = ["SCHEME", "HubFile", "hub_ref", "is_hub_ref", "local_files", "local_path"]

log = logging.getLogger(__name__)

SCHEME = "hf://"
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class HubFile:
    """A file of a Hugging Face Hub model repository, named by a glob that matches one file (or
    the shards of one split model)."""

    repo_id: str
    pattern: str

    def __str__(self) -> str:
        return f"{SCHEME}{self.repo_id}/{self.pattern}"

    def default_alias(self) -> str:
        """The file's stem when the pattern names one file; else the reference without its scheme."""
        if _GLOB_CHARS.isdisjoint(self.pattern):
            return self.pattern.rsplit("/", 1)[-1].removesuffix(".gguf")
        return f"{self.repo_id}/{self.pattern}"


# files fetched by this process, so that a loaded hub model's size and header can be read
_fetched: dict[HubFile, Path] = {}


def is_hub_ref(value: object) -> bool:
    return isinstance(value, str) and value.startswith(SCHEME)


def hub_ref(text: str, key: str, problems: Problems) -> HubFile | None:
    """The checked ``hf://owner/repo/glob`` reference, or None with the reason in ``problems``."""
    owner, _, rest = text.removeprefix(SCHEME).partition("/")
    name, _, pattern = rest.partition("/")
    if not (owner and name and pattern):
        problems.add(key, f"expected hf://owner/repo/file.gguf (the file a name or glob in the repository), "
                          f"got {text!r}")
        return None
    try:
        from huggingface_hub.utils import validate_repo_id
    except ImportError:
        problems.add(key, "hf:// models need the huggingface-hub package: pip install 'llamacore[hub]'")
        return None
    try:
        validate_repo_id(f"{owner}/{name}")
    except ValueError as exc:
        problems.add(key, f"{text!r} does not name a Hugging Face Hub repository: {exc}")
        return None
    return HubFile(f"{owner}/{name}", pattern)


def fetch(ref: HubFile) -> Path:
    """The local path of `ref`'s file, downloaded unless cached; its start and end are logged
    (huggingface_hub draws the progress bars). A reload (after an idle unload, an eviction, a
    crash) takes the file fetched before, without asking the Hub again."""
    known = _fetched.get(ref)
    if known is not None and known.exists():
        return known
    from huggingface_hub import constants

    source = ("the Hugging Face cache (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE
              else f"the Hugging Face Hub at {constants.ENDPOINT} (unless cached)")
    log.info("%s: fetching from %s", ref, source)
    started = time.monotonic()
    path = Path(download(ref.repo_id, ref.pattern))
    log.info("%s: ready in %.1fs: %s (%.1f MiB)", ref, time.monotonic() - started, path,
             path.stat().st_size / 2**20)
    _fetched[ref] = path
    return path


def local_files(model: Path | HubFile, projector: Path | HubFile | None) -> tuple[Path, Path | None]:
    """A model entry's model and projector files on this machine, hub references fetched first."""
    model = fetch(model) if isinstance(model, HubFile) else model
    return model, fetch(projector) if isinstance(projector, HubFile) else projector


def local_path(file: Path | HubFile) -> Path | None:
    """`file` itself, or where a hub file was fetched; None for a hub file not fetched yet."""
    return _fetched.get(file) if isinstance(file, HubFile) else file
