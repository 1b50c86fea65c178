"""llama-cpp-python itself in a child process, for differential tests (vendor/lcp_python.py says how:
its Python from the pinned sdist over llamacore's libllama)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import REPO_ROOT

_spec = importlib.util.spec_from_file_location("_llamacore_lcp_python", REPO_ROOT / "vendor/lcp_python.py")
lcp_python = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lcp_python)
sdist_path = lcp_python.sdist_path
extract = lcp_python.extract


def run(dest: Path, script: str, payload: Any, timeout: float = 600) -> Any:
    """Run `script` (Python reading JSON on stdin, writing JSON on stdout) with llama-cpp-python
    importable (extracted under dest); its JSON answer."""
    proc = subprocess.run([sys.executable, "-c", script], input=json.dumps(payload), cwd=dest,
                          env=lcp_python.environment(dest), capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, f"llama-cpp-python child failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout)
