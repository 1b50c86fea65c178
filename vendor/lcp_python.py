"""llama-cpp-python's own Python, from the pinned sdist, running over llamacore's libllama.

llama-cpp-python is ctypes over libllama. The sdist vendor/fetch.py takes llama.cpp from is
llama-cpp-python's own, so its Python binds exactly the llama.h that llamacore is built from, and
llamacore's extension exports every symbol it binds. Pointing its loader (LLAMA_CPP_LIB_PATH) at a
folder whose `libllama.so` is llamacore's extension runs the real llama-cpp-python without building
a second llama.cpp: differential tests and side-by-side benchmarks then compare the Python layers
over one C library. Run it in a child process with `environment()`: in that process `import
llama_cpp` is llama-cpp-python, never llamacore.
"""

from __future__ import annotations

import importlib.util
import os
import tarfile
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_llamacore_vendor_fetch", Path(__file__).with_name("fetch.py"))
fetch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fetch)


def sdist_path() -> Path:
    """Where the pinned sdist is cached (the package build downloads it there)."""
    pin = fetch.load_pin()
    return fetch.cache_dir() / f"{pin['package'].replace('-', '_')}-{pin['version']}.tar.gz"


def extract(dest: Path, wanted: list[str] = (), *, package: bool = False) -> Path:
    """The sdist's files `wanted` (paths below its root) and, with `package`, its llama_cpp/ package,
    under dest/<root>; that root (for sys.path, or as the cwd of its tests)."""
    archive = sdist_path()
    with tarfile.open(archive) as tar:
        root = tar.getnames()[0].split("/")[0]
        names = {f"{root}/{name}" for name in wanted}
        members = [m for m in tar.getmembers()
                   if m.name in names or (package and m.name.startswith(f"{root}/llama_cpp/"))]
        missing = names - {m.name for m in members}
        if missing:
            raise FileNotFoundError(f"{archive} lacks {sorted(missing)}")
        tar.extractall(dest, members=members, filter="data")
    return dest / root


def environment(dest: Path) -> dict[str, str]:
    """os.environ plus what a child process needs to import llama-cpp-python from the sdist (extracted
    under dest) over llamacore's extension."""
    from llamacore import _core

    root = extract(dest, package=True)
    libs = dest / "lib"
    libs.mkdir(parents=True, exist_ok=True)
    link = libs / "libllama.so"
    if not link.exists():
        link.symlink_to(Path(_core.__file__).resolve())
    return {**os.environ, "LLAMA_CPP_LIB_PATH": str(libs), "PYTHONPATH": str(root)}
