"""Model files from the Hugging Face Hub: ``model: hf://owner/repo/file-glob.gguf`` (and the same
for ``clip_model_path``/``mmproj``), fetched when the model first loads. ``hf://owner/repo:Q4_K_M``
names the repository's file of that quantization, as llama-server's ``-hf owner/repo:Q4_K_M`` does
(Q4_K_M when the tag is left out).

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

__all__ = ["SCHEME", "HubFile", "hub_ref", "is_hub_ref", "local_files", "local_path", "quant_glob"]

log = logging.getLogger(__name__)

SCHEME = "hf://"
_GLOB_CHARS = frozenset("*?[")
DEFAULT_QUANT = "Q4_K_M"         # llama-server's, for hf://owner/repo without a tag


@dataclass(frozen=True)
class HubFile:
    """A file of a Hugging Face Hub model repository, named by a glob that matches one file (or
    the shards of one split model)."""

    repo_id: str
    pattern: str
    quant: str | None = None         # named as hf://owner/repo:QUANT (the pattern is its glob)

    def __str__(self) -> str:
        if self.quant is not None:
            return f"{SCHEME}{self.repo_id}:{self.quant}"
        return f"{SCHEME}{self.repo_id}/{self.pattern}"

    def default_alias(self) -> str:
        """The file's stem when the pattern names one file; the repository's name and the quantization
        for hf://owner/repo:QUANT; else the reference without its scheme."""
        if self.quant is not None:
            return f"{self.repo_id.rsplit('/', 1)[-1]}-{self.quant}"
        if _GLOB_CHARS.isdisjoint(self.pattern):
            return self.pattern.rsplit("/", 1)[-1].removesuffix(".gguf")
        return f"{self.repo_id}/{self.pattern}"


# files fetched by this process, so that a loaded hub model's size and header can be read
_fetched: dict[HubFile, Path] = {}


def is_hub_ref(value: object) -> bool:
    return isinstance(value, str) and value.startswith(SCHEME)


def hub_ref(text: str, key: str, problems: Problems, *, quant_ok: bool = True) -> HubFile | None:
    """The checked ``hf://owner/repo/glob`` or (where `quant_ok`: a model, not a projector)
    ``hf://owner/repo[:QUANT]`` reference, or None with the reason in ``problems``."""
    owner, _, rest = text.removeprefix(SCHEME).partition("/")
    name, slash, pattern = rest.partition("/")
    quant = None
    if not slash and quant_ok:                      # hf://owner/repo[:QUANT]
        name, _, tag = name.partition(":")
        quant = tag or DEFAULT_QUANT
        pattern = quant_glob(quant)
    if not (owner and name and pattern):
        shorthand = " or hf://owner/repo:QUANT" if quant_ok else ""
        problems.add(key, f"expected hf://owner/repo/file.gguf (the file a name or glob in the repository)"
                          f"{shorthand}, got {text!r}")
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
    return HubFile(f"{owner}/{name}", pattern, quant)


def quant_glob(quant: str) -> str:
    """The glob of a repository's GGUF file of quantization `quant` (Q4_K_M, q8_0, ...): its name holds
    the tag in any case, as llama-server matches ``-hf owner/repo:QUANT``."""
    letters = "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else ("[_-]" if c in "_-" else c) for c in quant)
    return f"*{letters}*.gguf"


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
    # a quantization tag names a file at the top of the repository (as llama-server looks for it)
    path = Path(download(ref.repo_id, ref.pattern, top_level_only=ref.quant is not None))
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
