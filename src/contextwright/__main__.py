"""``python -m contextwright``: the command line."""

import sys

from .interfaces.cli import main

sys.exit(main())
