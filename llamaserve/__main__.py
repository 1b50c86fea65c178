"""``python -m llamaserve``: the same command line as the ``llamaserve`` script."""

from llamaserve.cli import main

raise SystemExit(main())
