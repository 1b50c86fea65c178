"""Obtain the pinned llama.cpp source tree into vendor/llama.cpp/.

The tree comes from a source package on PyPI (see llama_cpp.toml), downloaded with pip,
checked against the pinned sha256, cached under ~/.cache/llamacore (or $LLAMACORE_CACHE),
and extracted atomically. Run directly (`python vendor/fetch.py`) or via setup.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

VENDOR = Path(__file__).resolve().parent
PIN_FILE = VENDOR / "llama_cpp.toml"
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


def extract(archive: Path, pin: dict[str, str]) -> None:
    prefix = f"{archive.name[: -len('.tar.gz')]}/{pin['subdir']}/"
    with tempfile.TemporaryDirectory(dir=VENDOR) as tmp, tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.startswith(prefix) and (m.isfile() or m.isdir()):
                m.name = m.name[len(prefix):]
                members.append(m)
        if not members:
            raise RuntimeError(f"{archive} has no {pin['subdir']}/ tree")
        out = Path(tmp) / "llama.cpp"
        tar.extractall(out, members=members, filter="data")
        (out / STAMP.name).write_text(pin["sha256"] + "\n")
        if TREE.exists():
            shutil.rmtree(TREE)
        os.replace(out, TREE)


def ensure_source() -> Path:
    """The llama.cpp tree matching the pin, fetched if missing or stale."""
    pin = load_pin()
    if STAMP.exists() and STAMP.read_text().strip() == pin["sha256"]:
        return TREE
    extract(download(pin), pin)
    return TREE


if __name__ == "__main__":
    print(ensure_source())
