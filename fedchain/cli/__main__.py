"""``python -m fedchain.cli ARGS``: the ``fedchain`` command (the dashboard starts its jobs so)."""

import sys

from fedchain.cli import main

sys.exit(main())
