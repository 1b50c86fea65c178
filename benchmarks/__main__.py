"""``python -m benchmarks``: every benchmark, one report (see run.py)."""

import sys

from benchmarks.run import main

sys.exit(main())
