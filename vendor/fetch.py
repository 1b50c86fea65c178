"""Obtain the pinned llama.cpp source tree into vendor/llama.cpp/, with our patches applied.

The tree comes from a source package on PyPI (see llama_cpp.toml), downloaded with pip,
checked against the pinned sha256, cached under ~/.cache/llamacore (or $LLAMACORE_CACHE),
extracted, patched with vendor/patches/NNNN-*.patch in name order, and moved into place
atomically. A patch that no longer applies stops the build with its name. The stamp file
records the pin and the patches' hashes, so editing a patch re-extracts the tree.
Run directly (`python vendor/fetch.py`) or via setup.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

VENDOR = Path(__file__).resolve().parent
PIN_FILE = VENDOR / "llama_cpp.toml"
PATCHES = VENDOR / "patches"
TREE = VENDOR / "llama.cpp"
STAMP = TREE / ".llamacore-pin"


def load_pin() -> dict[str, str]:
    with PIN_FILE.open("rb") as f:
        return tomllib.load(f)["source"]


def cache_dir() -> Path:
    return Path(os.environ.get("LLAMACORE_CACHE", Path.home() / ".cache" / "llamacore"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(pin: dict[str, str]) -> Path:
    """The verified sdist, downloaded by pip on first use and cached afterwards."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    name = f"{pin['package'].replace('-', '_')}-{pin['version']}.tar.gz"
    archive = cache / name
    if not archive.exists() or sha256_of(archive) != pin["sha256"]:
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            # --no-binary for this package only: its build tools may still come as wheels.
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", pin["package"],
                 "--dest", tmp, f"{pin['package']}=={pin['version']}"],
                check=True,
            )
            got = Path(tmp) / name
            if not got.exists():
                raise RuntimeError(f"pip did not produce {name} in {tmp}: {os.listdir(tmp)}")
            os.replace(got, archive)
    actual = sha256_of(archive)
    if actual != pin["sha256"]:
        archive.unlink()
        raise RuntimeError(f"{archive} has sha256 {actual}, pinned {pin['sha256']}; removed it, retry")
    return archive


def patch_files() -> list[Path]:
    return sorted(PATCHES.glob("*.patch"))


def stamp_text(pin: dict[str, str]) -> str:
    """The pinned archive's hash, then one line per patch: what the extracted tree is made of."""
    lines = [pin["sha256"]] + [f"{sha256_of(p)}  {p.name}" for p in patch_files()]
    return "\n".join(lines) + "\n"


def apply_patch(tree: Path, patch: Path) -> None:
    """Apply one patch to `tree` (GNU patch, else git apply); refuse one that does not apply cleanly."""
    env = dict(os.environ)
    if shutil.which("patch"):
        cmd = ["patch", "-p1", "--forward", "--batch", "--fuzz=0", "--no-backup-if-mismatch",
               "-d", str(tree), "-i", str(patch)]
    elif shutil.which("git"):
        cmd = ["git", "-C", str(tree), "apply", "-p1", str(patch)]
        env["GIT_CEILING_DIRECTORIES"] = str(tree.parent)   # the tree is not part of an outer repository
    else:
        raise RuntimeError("applying vendor/patches needs GNU patch or git: install one (apt-get install patch)")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise RuntimeError(
            f"vendor/patches/{patch.name} does not apply to the pinned llama.cpp tree "
            f"(pin {load_pin()['version']}): update the patch for this tree.\n{result.stdout}{result.stderr}")


def extract(archive: Path, pin: dict[str, str], into: Path = TREE, patches: bool = True) -> None:
    """Replace `into` with the pinned tree from `archive`, patched unless `patches` is false."""
    prefix = f"{archive.name[: -len('.tar.gz')]}/{pin['subdir']}/"
    into.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into.parent) as tmp, tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.startswith(prefix) and (m.isfile() or m.isdir()):
                m.name = m.name[len(prefix):]
                members.append(m)
        if not members:
            raise RuntimeError(f"{archive} has no {pin['subdir']}/ tree")
        out = Path(tmp) / "llama.cpp"
        tar.extractall(out, members=members, filter="data")
        for patch in patch_files() if patches else []:
            apply_patch(out, patch)
        _date_now(out)
        (out / STAMP.name).write_text(stamp_text(pin) if patches else pin["sha256"] + "\n")
        if into.exists():
            shutil.rmtree(into)
        os.replace(out, into)


def _date_now(tree: Path) -> None:
    """Date every file of a freshly extracted tree now. The archive's own dates are older than any
    object built from an earlier tree, so a re-extracted tree (a patch added, changed or removed)
    would leave objects compiled from a removed patch in place; dated now, the tree rebuilds whole
    (ccache, when present, makes the unchanged files cheap)."""
    now = time.time()
    for path in tree.rglob("*"):
        if path.is_file():
            os.utime(path, (now, now))


def ensure_source() -> Path:
    """The llama.cpp tree matching the pin, fetched if missing or stale."""
    pin = load_pin()
    if STAMP.exists() and STAMP.read_text() == stamp_text(pin):
        return TREE
    extract(download(pin), pin)
    return TREE


def ensure_upstream_source(into: Path) -> Path:
    """The pinned tree without vendor/patches, at `into` (a benchmark's unpatched peer)."""
    pin = load_pin()
    stamp = into / STAMP.name
    if not (stamp.exists() and stamp.read_text() == pin["sha256"] + "\n"):
        extract(download(pin), pin, into, patches=False)
    return into


if __name__ == "__main__":
    print(ensure_source())
