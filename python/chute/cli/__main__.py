"""``python -m chute.cli ...``: the ``chute`` command."""

import sys

from chute.cli import main

sys.exit(main())
