"""``python -m gateway.cli``: the ``geogateway`` command."""

import sys

from gateway.cli import main

sys.exit(main())
