"""llama-cpp-python itself, for differential tests: its Python package from the pinned sdist (the one
vendor/fetch.py downloads to take llama.cpp from) running over llamacore's compiled extension.

llama-cpp-python is ctypes over libllama; the sdist pins the very llama.cpp tree llamacore is built
from, and llamacore's extension links that libllama with every llama.h symbol exported. So its real
Python code runs here without building its own copy: LLAMA_CPP_LIB_PATH names a folder whose
`libllama.so` is llamacore's extension. The child process imports `llama_cpp` from the extracted
sdist, never llamacore's aliases.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from helpers import REPO_ROOT


def _fetch_module():
    spec = importlib.util.spec_from_file_location("_llamacore_vendor_fetch", REPO_ROOT / "vendor/fetch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sdist_path() -> Path:
    """The cached llama-cpp-python sdist (vendor/fetch.py's cache and name)."""
    fetch = _fetch_module()
    pin = fetch.load_pin()
    return fetch.cache_dir() / f"{pin['package'].replace('-', '_')}-{pin['version']}.tar.gz"


def extract(archive: Path, dest: Path, wanted: list[str], *, package: bool = False) -> Path:
    """The sdist's files `wanted` (paths below its root) and, with `package`, its llama_cpp/ package,
    under dest/<root>; that root."""
    with tarfile.open(archive) as tar:
        root = tar.getnames()[0].split("/")[0]
        names = {f"{root}/{name}" for name in wanted}
        members = [m for m in tar.getmembers()
                   if m.name in names or (package and m.name.startswith(f"{root}/llama_cpp/"))]
        missing = names - {m.name for m in members}
        assert not missing, f"{archive} lacks {sorted(missing)}"
        tar.extractall(dest, members=members, filter="data")
    return dest / root


def library_folder(dest: Path) -> Path:
    """A folder whose libllama.so is llamacore's extension (for LLAMA_CPP_LIB_PATH)."""
    from llamacore import _core

    dest.mkdir(parents=True, exist_ok=True)
    link = dest / "libllama.so"
    if not link.exists():
        link.symlink_to(Path(_core.__file__).resolve())
    return dest


def run(root: Path, libs: Path, script: str, payload: Any, timeout: float = 600) -> Any:
    """Run `script` (Python reading JSON on stdin, writing JSON on stdout) with llama-cpp-python
    importable from the extracted sdist `root`; its JSON answer."""
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(libs), "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(payload), cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"llama-cpp-python child failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)
