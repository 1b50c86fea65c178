"""A Hugging Face Hub model repository for tests: its files, and a cache seeded with them in
huggingface_hub's exact layout (what `hf_hub_download` leaves behind).

    {cache}/models--{owner}--{name}/
        refs/main                   the commit, 40 hex digits, no newline
        blobs/{sha256}              each file's bytes (LFS files are named by their sha256)
        snapshots/{commit}/{path}   a relative symlink to ../../blobs/{sha256} (one more ../ per folder)

Also `split_gguf`: a model rewritten as llama.cpp's split files (NAME-0000k-of-0000n.gguf).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import gguf

COMMIT = "c0ffee0123456789abcdef0123456789abcdef01"


@dataclass
class HubRepo:
    """`files`: path in the repository -> the local file whose bytes it holds."""

    repo_id: str
    files: dict[str, Path]
    commit: str = COMMIT
    _digests: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)

    @cached_property
    def folder_name(self) -> str:
        return "models--" + self.repo_id.replace("/", "--")

    def digests(self, path: str) -> tuple[str, str]:
        """(git blob sha1, sha256) of a file: the Hub's `oid` and `lfs.oid`."""
        if path not in self._digests:
            data = self.files[path].read_bytes()
            git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            self._digests[path] = (git, hashlib.sha256(data).hexdigest())
        return self._digests[path]


def seed_cache(repo: HubRepo, cache_dir: Path, only: list[str] | None = None) -> Path:
    """Write `repo` (or its files in `only`) into `cache_dir` as huggingface_hub would; the
    snapshot folder is returned."""
    root = cache_dir / repo.folder_name
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs/main").write_text(repo.commit)
    (root / "blobs").mkdir(exist_ok=True)
    snapshot = root / "snapshots" / repo.commit
    for path in only if only is not None else repo.files:
        blob = root / "blobs" / repo.digests(path)[1]
        if not blob.exists():
            blob.write_bytes(repo.files[path].read_bytes())
        link = snapshot / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def split_gguf(src: Path, dst: Path, max_tensors: int) -> list[Path]:
    """`src` rewritten as split files named after `dst` (dst.stem-0000k-of-0000n.gguf), at most
    `max_tensors` tensors each, with the same metadata and tensors."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch, split_max_tensors=max_tensors)
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue                    # the header's own fields; the writer adds the architecture
        vtype = f.types[0]
        writer.add_key_value(name, f.contents(), vtype, f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(dst.parent.glob(f"{dst.stem}-*-of-*.gguf"))


REPO_ID = "acme/tiny-GGUF"


def tiny_repo(folder: Path, model: Path, projector: Path) -> HubRepo:
    """acme/tiny-GGUF: the tiny model, the same model split in three under split/, a vision
    projector for it, and a README."""
    shards = split_gguf(model, folder / "tiny-split-F32.gguf", max_tensors=10)
    assert len(shards) == 3, shards
    readme = folder / "README.md"
    readme.write_text("# tiny-GGUF\n\nA random-weight llama for tests.\n")
    return HubRepo(REPO_ID, {"README.md": readme, "tiny-F32.gguf": model, "mmproj-tiny-F16.gguf": projector,
                             **{f"split/{p.name}": p for p in shards}})
