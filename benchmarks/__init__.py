"""Side-by-side benchmarks of llamacore/llamaserve against llama.cpp's tools and llama-cpp-python.

The modules here are also plain scripts (``python benchmarks/bench_core.py``) that import each
other by their bare names, so the package puts its own folder on ``sys.path``.
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
